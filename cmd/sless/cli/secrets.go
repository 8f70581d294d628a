package cli

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/client"
	"sless.dev/sless/rules"
	"sless.dev/sless/triggers"
)

// The namespace's secrets: values go in (sless secret create, set) and never come out. Every
// answer of the API carries names, keys and versions only, and nothing here prints a value,
// not even in an error about one. Functions reference them by name (deploy --secret-env,
// --secret-file, sless.yaml); ls, get, describe and rm are the generic object verbs
// (secretKind), which sless secret ls, describe and rm call too.

func init() { subcommands = append(subcommands, newSecretCmd) }

var secretKind = kind[api.Secret]{
	singular: "secret", plural: "secrets", short: "sec",
	listFn: (*client.Client).ListSecrets, getFn: (*client.Client).GetSecret, deleteFn: (*client.Client).DeleteSecret,
	header: []string{"NAME", "KEYS", "VERSION", "UPDATED", "AGE"},
	row: func(s api.Secret, now time.Time) []string {
		return []string{s.Name, keyList(s.Keys, 4), strconv.FormatInt(s.Version, 10), age(s.UpdatedAt, now), age(s.CreatedAt, now)}
	},
	details: describeSecret,
	conflictHint: func(name string) string {
		return fmt.Sprintf("`sless describe secret %s` shows the references: drop them from the functions (sless.yaml, or --secret-env and --secret-file, then sless deploy) and the triggers, then rm again", name)
	},
}

// keyList joins keys, the first max of them and how many more.
func keyList(keys []string, max int) string {
	if len(keys) <= max {
		return strings.Join(keys, ",")
	}
	return strings.Join(keys[:max], ",") + fmt.Sprintf(",… (+%d)", len(keys)-max)
}

// SecretDetails is describe secret's answer: the secret (keys and version, no value) and
// what in its namespace reads it.
type SecretDetails struct {
	Secret api.Secret  `json:"secret"`
	UsedBy []secretUse `json:"used_by"`
}

// secretUse is one reference to a secret: a function's variable (Env, set to Key) or files
// (Path), or an event trigger's broker URL (Key).
type secretUse struct {
	Kind string `json:"kind"` // function or trigger
	Name string `json:"name"`
	Env  string `json:"env,omitempty"`
	Key  string `json:"key,omitempty"`
	Path string `json:"path,omitempty"`
}

// text is how describe words the reference, as describe function does.
func (u secretUse) text(secret string) string {
	switch {
	case u.Env != "":
		return secretEnvText(api.SecretEnv{Name: u.Env, Secret: secret, Key: u.Key})
	case u.Path != "":
		return secretFileText(api.SecretFile{Secret: secret, Path: u.Path})
	}
	return "broker URL ← " + secret + "/" + u.Key
}

// secretEnvText is a secret_env entry for people: DB_PASSWORD ← db/password.
func secretEnvText(e api.SecretEnv) string { return e.Name + " ← " + e.Secret + "/" + e.Key }

// secretFileText is a secret_files entry for people: files: db → /var/sless/secrets/db.
func secretFileText(f api.SecretFile) string {
	return "files: " + f.Secret + " → " + rules.SecretFilePath(f.Secret, f.Path)
}

// secretUses finds what in the functions and triggers reads the secret name.
func secretUses(name string, fns []api.Function, trs []api.Trigger) []secretUse {
	uses := []secretUse{}
	for _, f := range fns {
		for _, e := range f.SecretEnv {
			if e.Secret == name {
				uses = append(uses, secretUse{Kind: "function", Name: f.Name, Env: e.Name, Key: e.Key})
			}
		}
		for _, sf := range f.SecretFiles {
			if sf.Secret == name {
				uses = append(uses, secretUse{Kind: "function", Name: f.Name, Path: rules.SecretFilePath(sf.Secret, sf.Path)})
			}
		}
	}
	for _, t := range trs {
		for _, r := range triggers.SecretRefs(t.TriggerSpec) {
			if r.Secret == name {
				uses = append(uses, secretUse{Kind: "trigger", Name: t.Name, Key: r.Key})
			}
		}
	}
	return uses
}

func describeSecret(ctx context.Context, s *session, sec api.Secret) (any, func(io.Writer) error, error) {
	fns, err := s.c.ListFunctions(ctx, s.ns)
	if err != nil {
		return nil, nil, s.explain(err, "listing the functions that may use secret "+sec.Name)
	}
	trs, err := s.c.ListTriggers(ctx, s.ns)
	if err != nil {
		return nil, nil, s.explain(err, "listing the triggers that may use secret "+sec.Name)
	}
	d := SecretDetails{Secret: sec, UsedBy: secretUses(sec.Name, fns, trs)}
	return d, func(w io.Writer) error {
		err := describeFields(w, sec.Name, sec.Namespace, sec.CreatedAt, func(fl fields) {
			fl.add("Keys", strings.Join(sec.Keys, ", "))
			fl.add("Version", sec.Version)
			if !sec.UpdatedAt.IsZero() {
				fl.addTime("Updated", &sec.UpdatedAt)
			}
		})
		if err != nil {
			return err
		}
		fmt.Fprintln(w, "\nUsed by:")
		t := table{header: []string{"KIND", "NAME", "AS"}}
		for _, u := range d.UsedBy {
			t.rows = append(t.rows, []string{u.Kind, u.Name, u.text(sec.Name)})
		}
		return indented(w, t)
	}, nil
}

func newSecretCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "secret",
		Aliases: []string{"secrets"},
		Short:   "Create, rotate, list and delete the secrets your functions read (values go in, never come out)",
		Long: `A secret is a named set of keys and values in your namespace. Functions read them by
reference: sless deploy --secret-env DB_PASSWORD=db/password sets a variable to the value of
a key, --secret-file db mounts every key as a file (` + rules.SecretMountDir + `/db/<key>), and
sless.yaml can list both (secret_env, secret_files). An event trigger reads its broker URL
from one (broker_secret).

Values go in with create and set and never come out: ls, describe, get and -o json|yaml show
the keys, the version and who uses it. set replaces the whole data (keys not given are
removed): that is a rotation, a new version, and the functions that reference the secret
restart with it.`,
		Example: `  sless secret create db --from-literal user=app --from-file password=./db-password.txt
  printf %s "$NEW_PASSWORD" | sless secret set db --from-literal user=app --from-file password=-
  sless secret ls
  sless secret describe db
  sless secret rm db`,
	}
	cmd.AddCommand(newSecretWriteCmd(false), newSecretWriteCmd(true), newSecretLsCmd(), newSecretDescribeCmd(), newSecretRmCmd())
	return cliCommand(cmd)
}

// secretDataFlags are where create and set take the data from.
type secretDataFlags struct{ literals, files []string }

func (f *secretDataFlags) bind(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringArrayVar(&f.literals, "from-literal", nil, "KEY=value, repeated (the value stays in your shell history: KEY=- of --from-file reads it from stdin instead)")
	fs.StringArrayVar(&f.files, "from-file", nil, "KEY=PATH, or PATH for a key named as the file; repeated; PATH - is stdin; bytes that are not UTF-8 go as base64")
}

// newSecretWriteCmd is sless secret create, or with rotate sless secret set.
func newSecretWriteCmd(rotate bool) *cobra.Command {
	var f secretDataFlags
	cmd := &cobra.Command{
		Use:   "create <name> (--from-literal KEY=value | --from-file KEY=PATH)...",
		Short: "Create a secret from literal values and files",
		Example: `  sless secret create db --from-literal user=app --from-file password=./db-password.txt
  sless secret create tls --from-file ./tls.crt --from-file ./tls.key`,
		Args: cobra.ExactArgs(1),
	}
	if rotate {
		cmd.Use = "set <name> (--from-literal KEY=value | --from-file KEY=PATH)..."
		cmd.Short = "Replace a secret's whole data (a rotation: a new version; the functions that reference it restart)"
		cmd.Example = `  sless secret set db --from-literal user=app --from-file password=./new-password.txt
  printf %s "$NEW_PASSWORD" | sless secret set db --from-literal user=app --from-file password=-`
		cmd.ValidArgsFunction = completeNamesOf(secretKind)
	}
	f.bind(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		name := args[0]
		data, err := readSecretData(f.literals, f.files, cmd.InOrStdin())
		if err != nil {
			return err
		}
		s, err := connect(cmd.Context(), "")
		if err != nil {
			return err
		}
		if rotate {
			sec, err := s.c.UpdateSecret(cmd.Context(), s.ns, name, data)
			if client.IsNotFound(err) {
				return fmt.Errorf("secret %s: %w; `sless secret create %s` creates it, `sless ls secrets` lists the existing ones", name, err, name)
			}
			if err != nil {
				return s.explain(err, "rotating secret "+name)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "secret %s rotated to version %d; functions that reference it roll\n", name, sec.Version)
			return nil
		}
		sec, err := s.c.CreateSecret(cmd.Context(), s.ns, api.CreateSecret{Name: name, SecretFields: data})
		if client.IsConflict(err) {
			return fmt.Errorf("creating secret %s: %w; `sless secret set %s` replaces its data (a rotation)", name, err, name)
		}
		if err != nil {
			return s.explain(err, "creating secret "+name)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "secret %s created with %s: %s\n", name, plural(len(sec.Keys), "key"), strings.Join(sec.Keys, ", "))
		return nil
	}
	return cmd
}

// readSecretData reads the data of create and set: --from-literal KEY=value and --from-file
// KEY=PATH (PATH alone: the key is the file's name; - is stdin). Text goes in data, bytes that
// are not UTF-8 in data_base64. No error quotes a value, nor an argument that may be one.
func readSecretData(literals, files []string, stdin io.Reader) (api.SecretFields, error) {
	var out api.SecretFields
	seen := map[string]string{} // key → the flag that gave it
	total := 0
	add := func(flag, key string, value []byte) error {
		if err := rules.CheckSecretKey(key); err != nil {
			return usageErrorf("%s: %v", flag, err)
		}
		if prev, dup := seen[key]; dup {
			return usageErrorf("%s: key %q is also given by %s; give each key once", flag, key, prev)
		}
		seen[key] = flag
		if total += len(key) + len(value); total > rules.MaxSecretBytes {
			return usageErrorf("%s: the secret's keys and values come to more than %s, the most a secret holds; keep large data in storage and the credentials to it here", flag, byteSize(rules.MaxSecretBytes))
		}
		if utf8.Valid(value) {
			if out.Data == nil {
				out.Data = map[string]string{}
			}
			out.Data[key] = string(value)
		} else {
			if out.DataBase64 == nil {
				out.DataBase64 = map[string]string{}
			}
			out.DataBase64[key] = base64.StdEncoding.EncodeToString(value)
		}
		return nil
	}
	for i, l := range literals {
		key, value, ok := strings.Cut(l, "=")
		switch {
		case !ok:
			// The argument is not shown: without its '=' it may be the value alone.
			return out, usageErrorf("--from-literal (the %s): want KEY=value, and it has no '='", ordinal(i+1))
		case key == "":
			return out, usageErrorf("--from-literal (the %s): want KEY=value, and the key before '=' is empty", ordinal(i+1))
		}
		if err := add("--from-literal "+key, key, []byte(value)); err != nil {
			return out, err
		}
	}
	readStdin := false
	for _, f := range files {
		key, path, ok := strings.Cut(f, "=")
		switch {
		case !ok:
			key, path = filepath.Base(f), f
			if f == "-" {
				return out, usageErrorf("--from-file -: name the key stdin is for, e.g. --from-file password=-")
			}
		case key == "":
			return out, usageErrorf("--from-file %q: want KEY=PATH, and the key before '=' is empty", f)
		case path == "":
			return out, usageErrorf("--from-file %q: want KEY=PATH, and the path after '=' is empty", f)
		}
		flag := "--from-file " + key
		var value []byte
		if path == "-" {
			if readStdin {
				return out, usageErrorf("%s=-: stdin is read once, and another key already reads it", flag)
			}
			readStdin = true
			v, err := readLimited(stdin, "stdin", flag)
			if err != nil {
				return out, err
			}
			value = v
		} else {
			file, err := os.Open(path)
			if err != nil {
				return out, usageErrorf("%s: %v", flag, err)
			}
			value, err = readLimited(file, path, flag)
			file.Close()
			if err != nil {
				return out, err
			}
		}
		if err := add(flag, key, value); err != nil {
			return out, err
		}
	}
	if len(seen) == 0 {
		return out, usageErrorf("no data: give the keys and values with --from-literal KEY=value or --from-file KEY=PATH (each repeated)")
	}
	return out, nil
}

// readLimited reads r (named from) up to the most a secret holds.
func readLimited(r io.Reader, from, flag string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, rules.MaxSecretBytes+1))
	switch {
	case err != nil:
		return nil, usageErrorf("%s: reading %s: %v", flag, from, err)
	case len(data) > rules.MaxSecretBytes:
		return nil, usageErrorf("%s: %s is larger than %s, the most a secret holds; keep large data in storage and the credentials to it here", flag, from, byteSize(rules.MaxSecretBytes))
	}
	return data, nil
}

func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return strconv.Itoa(n) + suffix + " one"
}

func newSecretLsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the secrets of your namespace: keys, version, age (never a value); as sless ls secrets",
		Args:    cobra.NoArgs,
	}
	out := bindOutput(cmd, formatTable, formatJSON, formatYAML)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return runGet(cmd, out, secretKind.plural, "") }
	return cmd
}

func newSecretDescribeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:               "describe <name>",
		Short:             "Show a secret's keys, version and the functions and triggers that use it; as sless describe secret",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeNamesOf(secretKind),
	}
	out := bindOutput(cmd, formatTable, formatJSON, formatYAML)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return runDescribe(cmd, out, secretKind.singular, args[0])
	}
	return cmd
}

func newSecretRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:               "rm <name>...",
		Short:             "Delete secrets that nothing references any more; as sless rm secret",
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeNamesOf(secretKind),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRm(cmd, secretKind.singular, args)
		},
	}
}

// Deploy's references to secrets: --secret-env, --secret-file and sless.yaml's secret_env
// and secret_files.

// parseSecretEnv reads --secret-env NAME=secret/key values; a later value for the same
// variable replaces an earlier one.
func parseSecretEnv(values []string) ([]api.SecretEnv, error) {
	var out []api.SecretEnv
	for _, v := range values {
		name, ref, ok := strings.Cut(v, "=")
		secret, key, ok2 := strings.Cut(ref, "/")
		if !ok || !ok2 || name == "" || secret == "" || key == "" {
			return nil, usageErrorf("--secret-env %q: want NAME=secret/key, e.g. DB_PASSWORD=db/password", v)
		}
		e := api.SecretEnv{Name: name, Secret: secret, Key: key}
		if err := checkSecretEnv(e); err != nil {
			return nil, usageErrorf("--secret-env %q: %v", v, err)
		}
		out = mergeSecretEnv(out, e)
	}
	return out, nil
}

// parseSecretFiles reads --secret-file secret[:/dir] values; a later value for the same
// secret replaces an earlier one.
func parseSecretFiles(values []string) ([]api.SecretFile, error) {
	var out []api.SecretFile
	for _, v := range values {
		secret, dir, hasDir := strings.Cut(v, ":")
		if secret == "" || (hasDir && dir == "") {
			return nil, usageErrorf("--secret-file %q: want a secret's name, or name:/dir, e.g. db or db:/etc-app/db", v)
		}
		f := api.SecretFile{Secret: secret, Path: dir}
		if err := checkSecretFile(f); err != nil {
			return nil, usageErrorf("--secret-file %q: %v", v, err)
		}
		out = mergeSecretFile(out, f)
	}
	return out, nil
}

// checkSecretEnv checks an entry as the API will: a variable a function may set, a secret's
// name and a key.
func checkSecretEnv(e api.SecretEnv) error {
	if err := rules.CheckEnvName(e.Name); err != nil {
		return err
	}
	if err := rules.CheckName(e.Secret); err != nil {
		return fmt.Errorf("secret %w", err)
	}
	if err := rules.CheckSecretKey(e.Key); err != nil {
		return fmt.Errorf("key %w", err)
	}
	return nil
}

// checkSecretFile checks an entry as the API will: a secret's name and, when given, a
// directory the files may be mounted in.
func checkSecretFile(f api.SecretFile) error {
	if err := rules.CheckName(f.Secret); err != nil {
		return fmt.Errorf("secret %w", err)
	}
	if f.Path != "" {
		return rules.CheckSecretDir(f.Path)
	}
	return nil
}

// mergeSecretEnv replaces the entry of list for e's variable with e, or appends e.
func mergeSecretEnv(list []api.SecretEnv, e api.SecretEnv) []api.SecretEnv {
	if i := slices.IndexFunc(list, func(o api.SecretEnv) bool { return o.Name == e.Name }); i >= 0 {
		list[i] = e
		return list
	}
	return append(list, e)
}

// mergeSecretFile replaces the entry of list for f's secret with f, or appends f.
func mergeSecretFile(list []api.SecretFile, f api.SecretFile) []api.SecretFile {
	if i := slices.IndexFunc(list, func(o api.SecretFile) bool { return o.Secret == f.Secret }); i >= 0 {
		list[i] = f
		return list
	}
	return append(list, f)
}

// sameSecretFiles reports whether a and b mount the same secrets in the same directories
// (an empty path and the default directory alike).
func sameSecretFiles(a, b []api.SecretFile) bool {
	return slices.EqualFunc(a, b, func(x, y api.SecretFile) bool {
		return x.Secret == y.Secret && rules.SecretFilePath(x.Secret, x.Path) == rules.SecretFilePath(y.Secret, y.Path)
	})
}
