package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/utils/ptr"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
)

// secretMarker is a value no output or error may show.
const secretMarker = "marker-5f1e0b-value"

func TestParseSecretEnv(t *testing.T) {
	checkParses(t, "parseSecretEnv", parseSecretEnv, []parseCase[[]api.SecretEnv]{
		{in: nil, want: nil},
		{in: []string{"DB_PASSWORD=db/password"}, want: []api.SecretEnv{{Name: "DB_PASSWORD", Secret: "db", Key: "password"}}},
		{in: []string{"A=s/k.1", "B=s/k", "A=t/x"}, want: []api.SecretEnv{{Name: "A", Secret: "t", Key: "x"}, {Name: "B", Secret: "s", Key: "k"}}},
		{in: []string{"DB_PASSWORD"}, code: exitUsage},
		{in: []string{"DB_PASSWORD=db"}, code: exitUsage},
		{in: []string{"=db/password"}, code: exitUsage},
		{in: []string{"A=/password"}, code: exitUsage},
		{in: []string{"A=db/"}, code: exitUsage},
		{in: []string{"A=db/a/b"}, code: exitUsage},  // a key holds no '/'
		{in: []string{"A=Db/key"}, code: exitUsage},  // not a name
		{in: []string{"1A=db/key"}, code: exitUsage}, // not a variable
		{in: []string{"PATH=db/key"}, code: exitUsage},
		{in: []string{"SLESS_X=db/key"}, code: exitUsage},
	})
}

func TestParseSecretFiles(t *testing.T) {
	checkParses(t, "parseSecretFiles", parseSecretFiles, []parseCase[[]api.SecretFile]{
		{in: nil, want: nil},
		{in: []string{"db"}, want: []api.SecretFile{{Secret: "db"}}},
		{in: []string{"db:/srv/db", "tls", "db"}, want: []api.SecretFile{{Secret: "db"}, {Secret: "tls"}}},
		{in: []string{""}, code: exitUsage},
		{in: []string{"db:"}, code: exitUsage},
		{in: []string{":/srv/db"}, code: exitUsage},
		{in: []string{"db:srv/db"}, code: exitUsage},
		{in: []string{"db:/etc/db"}, code: exitUsage},
		{in: []string{"db:/srv/../etc"}, code: exitUsage},
		{in: []string{"DB"}, code: exitUsage},
	})
}

// TestReadSecretData: literals and files become data (text) or data_base64 (anything not
// UTF-8); a malformed flag is a usage error naming the flag and never quoting a value.
func TestReadSecretData(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	text := write("password.txt", []byte(secretMarker+"\n"))
	bin := []byte("\xff\xfe\x00" + secretMarker)
	binary := write("cert.der", bin)
	big := write("big", bytes.Repeat([]byte("x"), rules.MaxSecretBytes+1))
	for _, tc := range []struct {
		name            string
		literals, files []string
		stdin           string
		want            api.SecretFields
		code            int
		errWant         string
	}{
		{name: "literals", literals: []string{"user=app", "dsn=a=b", "empty="},
			want: api.SecretFields{Data: map[string]string{"user": "app", "dsn": "a=b", "empty": ""}}},
		{name: "files", files: []string{"password=" + text, binary},
			want: api.SecretFields{Data: map[string]string{"password": secretMarker + "\n"},
				DataBase64: map[string]string{"cert.der": base64.StdEncoding.EncodeToString(bin)}}},
		{name: "stdin", literals: []string{"user=app"}, files: []string{"password=-"}, stdin: secretMarker,
			want: api.SecretFields{Data: map[string]string{"user": "app", "password": secretMarker}}},
		{name: "no data", code: exitUsage, errWant: "--from-literal KEY=value or --from-file KEY=PATH"},
		{name: "no =", literals: []string{"user=app", secretMarker}, code: exitUsage, errWant: "--from-literal (the 2nd one): want KEY=value"},
		{name: "empty key", literals: []string{"=" + secretMarker}, code: exitUsage, errWant: "--from-literal (the 1st one)"},
		{name: "bad key", literals: []string{"a/b=" + secretMarker}, code: exitUsage, errWant: "--from-literal a/b"},
		{name: "twice", literals: []string{"password=" + secretMarker}, files: []string{"password=" + text}, code: exitUsage,
			errWant: "--from-file password: key \"password\" is also given by --from-literal password"},
		{name: "missing file", files: []string{"k=" + filepath.Join(dir, "nope")}, code: exitUsage, errWant: "--from-file k"},
		{name: "file empty key", files: []string{"=" + text}, code: exitUsage, errWant: "--from-file"},
		{name: "file empty path", files: []string{"k="}, code: exitUsage, errWant: "--from-file"},
		{name: "stdin without key", files: []string{"-"}, code: exitUsage, errWant: "--from-file -"},
		{name: "stdin twice", files: []string{"a=-", "b=-"}, stdin: secretMarker, code: exitUsage, errWant: "stdin is read once"},
		{name: "too big", files: []string{"k=" + big}, code: exitUsage, errWant: "the most a secret holds"},
		{name: "too big in all", literals: []string{"a=" + strings.Repeat("y", rules.MaxSecretBytes/2)}, files: []string{"b=" + write("half", bytes.Repeat([]byte("z"), rules.MaxSecretBytes/2))},
			code: exitUsage, errWant: "the most a secret holds"},
	} {
		got, err := readSecretData(tc.literals, tc.files, strings.NewReader(tc.stdin))
		if code := exitCodeOf(err); code != tc.code {
			t.Errorf("%s: %+v, %v (exit %d); want exit %d", tc.name, got, err, code, tc.code)
			continue
		}
		if err != nil {
			if !strings.Contains(err.Error(), tc.errWant) || strings.Contains(err.Error(), secretMarker) {
				t.Errorf("%s: error %q: want it to say %q and never the value", tc.name, err, tc.errWant)
			}
			continue
		}
		if !equalFields(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func equalFields(a, b api.SecretFields) bool {
	return maps.Equal(a.Data, b.Data) && maps.Equal(a.DataBase64, b.DataBase64)
}

// TestProjectSecretRefs: sless.yaml's secret_env and secret_files are checked like the
// flags, the flags merge over them, and a file without them leaves the function's own.
func TestProjectSecretRefs(t *testing.T) {
	dir := t.TempDir()
	load := func(yaml string) (project, error) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, projectFile), []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		return loadProject(dir)
	}
	p, err := load(`runtime: python
secret_env:
  - {name: DB_PASSWORD, secret: db, key: password}
  - {name: DB_USER, secret: db, key: user}
secret_files:
  - secret: tls
  - {secret: db, path: /srv/db}
`)
	if err != nil {
		t.Fatal(err)
	}
	fields := api.FunctionFields{
		SecretEnv:   &[]api.SecretEnv{{Name: "DB_USER", Secret: "db2", Key: "user"}, {Name: "TOKEN", Secret: "api", Key: "token"}},
		SecretFiles: &[]api.SecretFile{{Secret: "db"}},
	}
	p.addSecretRefs(&fields)
	wantEnv := []api.SecretEnv{{Name: "DB_PASSWORD", Secret: "db", Key: "password"}, {Name: "DB_USER", Secret: "db2", Key: "user"}, {Name: "TOKEN", Secret: "api", Key: "token"}}
	wantFiles := []api.SecretFile{{Secret: "tls"}, {Secret: "db"}}
	if fields.SecretEnv == nil || !slices.Equal(*fields.SecretEnv, wantEnv) || fields.SecretFiles == nil || !slices.Equal(*fields.SecretFiles, wantFiles) {
		t.Errorf("merged: %+v %+v", fields.SecretEnv, fields.SecretFiles)
	}
	// Without flags the file's lists are sent as they are; a file without them sends none.
	fields = api.FunctionFields{}
	p.addSecretRefs(&fields)
	if fields.SecretEnv == nil || len(*fields.SecretEnv) != 2 || fields.SecretFiles == nil || len(*fields.SecretFiles) != 2 {
		t.Errorf("the file alone: %+v %+v", fields.SecretEnv, fields.SecretFiles)
	}
	p, err = load("runtime: python\nsecret_env: []\n")
	fields = api.FunctionFields{}
	if p.addSecretRefs(&fields); err != nil || fields.SecretEnv == nil || len(*fields.SecretEnv) != 0 || fields.SecretFiles != nil {
		t.Errorf("secret_env: [] must clear the list and leave the files: %v %+v %+v", err, fields.SecretEnv, fields.SecretFiles)
	}
	p, err = load(string(projectYAML("python3.12"))) // init's commented example
	fields = api.FunctionFields{}
	if p.addSecretRefs(&fields); err != nil || fields != (api.FunctionFields{}) {
		t.Errorf("sless init's sless.yaml: %v %+v", err, fields)
	}
	for _, bad := range []string{
		"secret_env:\n  - {name: DB_PASSWORD, secret: db}\n",
		"secret_env:\n  - {name: PATH, secret: db, key: k}\n",
		"secret_env:\n  - {name: A, secret: db, key: k, value: v}\n",
		"secret_files:\n  - {secret: db, path: etc}\n",
		"secret_files:\n  - {path: /srv/x}\n",
		"secret_env: {name: A}\n",
	} {
		if _, err := load(bad); exitCodeOf(err) != exitUsage || !strings.Contains(err.Error(), projectFile) {
			t.Errorf("sless.yaml %q: %v, want a usage error naming it", bad, err)
		}
	}
}

// TestDeploySendsSecretRefs: deploy sends sless.yaml's references merged with the flags', on
// create and on update, and sends nothing when the function already has them.
func TestDeploySendsSecretRefs(t *testing.T) {
	fake := startFakeAPI(t)
	dir := filepath.Join(t.TempDir(), "h")
	if out, err := runCLI(t, newInitCmd, dir, "--runtime", "python"); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, projectFile), []byte(`runtime: python
secret_env:
  - {name: DB_PASSWORD, secret: db, key: password}
secret_files:
  - {secret: tls}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, newDeployCmd, dir, "--wait=false", "--secret-env", "TOKEN=api/token")
	if err != nil || len(fake.created) != 1 {
		t.Fatalf("deploy: %v %+v\n%s", err, fake.created, out)
	}
	c := fake.created[0]
	wantEnv := []api.SecretEnv{{Name: "DB_PASSWORD", Secret: "db", Key: "password"}, {Name: "TOKEN", Secret: "api", Key: "token"}}
	if c.SecretEnv == nil || !slices.Equal(*c.SecretEnv, wantEnv) || c.SecretFiles == nil || !slices.Equal(*c.SecretFiles, []api.SecretFile{{Secret: "tls"}}) {
		t.Errorf("created with %+v %+v", c.SecretEnv, c.SecretFiles)
	}

	// The function has them already (its default path filled in): no update.
	fake.existing = &api.Function{Name: "h", FunctionSpec: api.FunctionSpec{Runtime: "python3.11",
		SecretEnv: []api.SecretEnv{{Name: "DB_PASSWORD", Secret: "db", Key: "password"}}, SecretFiles: []api.SecretFile{{Secret: "tls", Path: rules.SecretMountDir + "/tls"}}}}
	if out, err := runCLI(t, newDeployCmd, dir, "--wait=false"); err != nil || len(fake.updated) != 0 {
		t.Fatalf("deploy of what the function has: %v, updated %+v\n%s", err, fake.updated, out)
	}
	// A flag that changes one: the merged list is sent, the unchanged one is not.
	if out, err := runCLI(t, newDeployCmd, dir, "--wait=false", "--secret-env", "DB_PASSWORD=db/password2"); err != nil || len(fake.updated) != 1 {
		t.Fatalf("deploy with a changed reference: %v, updated %+v\n%s", err, fake.updated, out)
	}
	u := fake.updated[0]
	if u.SecretEnv == nil || !slices.Equal(*u.SecretEnv, []api.SecretEnv{{Name: "DB_PASSWORD", Secret: "db", Key: "password2"}}) || u.SecretFiles != nil {
		t.Errorf("updated with %+v %+v", u.SecretEnv, u.SecretFiles)
	}
}

// runCLIIn is runCLI with stdin, returning stdout and stderr apart.
func runCLIIn(t *testing.T, stdin string, mk func() *cobra.Command, args ...string) (string, string, error) {
	t.Helper()
	cmd := mk()
	var out, errOut bytes.Buffer
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true // as the root command is
	err := cmd.ExecuteContext(t.Context())
	return out.String(), errOut.String(), err
}

// TestSecretCommands drives sless secret and the generic verbs against `sless dev`: create,
// ls, get, describe (with the functions and triggers that use it), set (a rotation), rm
// (refused while referenced, naming the function), describe function's references — and no
// output or error ever holds a value.
func TestSecretCommands(t *testing.T) {
	d := startDevSession(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("SLESS_ENDPOINT", d.endpoint)
	t.Setenv("SLESS_TOKEN", d.token)
	ctx := context.Background()
	binary := append([]byte("\xff\xfe\x00"), secretMarker...)
	certFile := filepath.Join(t.TempDir(), "cert.der")
	if err := os.WriteFile(certFile, binary, 0o600); err != nil {
		t.Fatal(err)
	}
	var said []string // everything the CLI printed, checked for values at the end
	run := func(stdin string, mk func() *cobra.Command, args ...string) (string, error) {
		t.Helper()
		out, errOut, err := runCLIIn(t, stdin, mk, args...)
		said = append(said, out, errOut)
		if err != nil {
			said = append(said, err.Error())
		}
		return out + errOut, err
	}
	ok := func(mk func() *cobra.Command, args ...string) string {
		t.Helper()
		out, err := run("", mk, args...)
		if err != nil {
			t.Fatalf("sless %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	fails := func(code int, want string, mk func() *cobra.Command, args ...string) {
		t.Helper()
		out, err := run("", mk, args...)
		if exitCodeOf(err) != code || !strings.Contains(err.Error(), want) {
			t.Fatalf("sless %s: %v (exit %d), want exit %d saying %q\n%s", strings.Join(args, " "), err, exitCodeOf(err), code, want, out)
		}
	}

	out := ok(newSecretCmd, "create", "db", "--from-literal", "password="+secretMarker, "--from-file", "cert="+certFile)
	mustContain(t, "create", out, "secret db created with 2 keys: cert, password")
	ok(newSecretCmd, "create", "other", "--from-literal", "k=v")
	fails(1, "`sless secret set db` replaces its data", newSecretCmd, "create", "db", "--from-literal", "password=x")
	fails(exitUsage, "--from-literal (the 1st one)", newSecretCmd, "create", "x", "--from-literal", secretMarker)
	fails(exitUsage, "no data", newSecretCmd, "create", "x")

	out = ok(newSecretCmd, "ls")
	mustMatch(t, "secret ls", out, `(?m)^NAME\s+KEYS\s+VERSION\s+UPDATED\s+AGE$`)
	mustMatch(t, "secret ls", out, `(?m)^db\s+cert,password\s+1\s`)
	if out2 := ok(newLsCmd, "secrets"); out2 != out {
		t.Errorf("sless ls secrets and sless secret ls differ:\n%s\n%s", out2, out)
	}
	list := decodeJSON[[]api.Secret](t, ok(newLsCmd, "secrets", "-o", "json"))
	if len(list) != 2 || list[0].Name != "db" || list[0].Version != 1 || strings.Join(list[0].Keys, ",") != "cert,password" {
		t.Errorf("ls secrets -o json: %+v", list)
	}
	mustContain(t, "get secret -o yaml", ok(newGetCmd, "secret", "db", "-o", "yaml"), "name: db", "version: 1", "- cert")

	// A function and an event trigger that use it.
	if _, err := d.c.CreateFunction(ctx, d.ns, api.CreateFunction{Name: "api", FunctionFields: api.FunctionFields{Runtime: ptr.To("python3.11"),
		SecretEnv:   &[]api.SecretEnv{{Name: "DB_PASSWORD", Secret: "db", Key: "password"}},
		SecretFiles: &[]api.SecretFile{{Secret: "db"}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.CreateTrigger(ctx, d.ns, api.CreateTrigger{Name: "orders", TriggerFields: api.TriggerFields{Type: ptr.To(api.TriggerEvent),
		Function: ptr.To("api"), Queue: ptr.To(d.ns + ".orders"), BrokerSecret: ptr.To("db"), BrokerSecretKey: ptr.To("password")}}); err != nil {
		t.Fatal(err)
	}
	out = ok(newSecretCmd, "describe", "db")
	mustContain(t, "secret describe", out, "Keys:", "cert, password", "Version:", "Used by:")
	mustMatch(t, "secret describe", out, `function\s+api\s+DB_PASSWORD ← db/password`)
	mustMatch(t, "secret describe", out, `function\s+api\s+files: db → /var/sless/secrets/db`)
	mustMatch(t, "secret describe", out, `trigger\s+orders\s+broker URL ← db/password`)
	if out2 := ok(newDescribeCmd, "secret", "db"); out2 != out {
		t.Errorf("sless describe secret and sless secret describe differ:\n%s\n%s", out2, out)
	}
	det := decodeJSON[secretDetails](t, ok(newDescribeCmd, "secret", "db", "-o", "json"))
	if det.Secret.Name != "db" || len(det.UsedBy) != 3 {
		t.Errorf("describe secret -o json: %+v", det)
	}
	mustContain(t, "describe other", ok(newSecretCmd, "describe", "other"), "Used by:\n  none")
	mustContain(t, "describe function", ok(newDescribeCmd, "function", "api"),
		"Secrets:\n  DB_PASSWORD ← db/password\n  files: db → /var/sless/secrets/db\n")

	// Rotation: the whole data replaced, from stdin here.
	out, err := run(secretMarker+"-2", newSecretCmd, "set", "db", "--from-file", "password=-")
	if err != nil {
		t.Fatalf("secret set: %v\n%s", err, out)
	}
	mustContain(t, "secret set", out, "secret db rotated to version 2; functions that reference it roll")
	if s, err := d.c.GetSecret(ctx, d.ns, "db"); err != nil || s.Version != 2 || strings.Join(s.Keys, ",") != "password" {
		t.Errorf("after set: %+v, %v", s, err)
	}
	fails(1, "`sless secret create nope` creates it", newSecretCmd, "set", "nope", "--from-literal", "a=b")

	// rm: refused while referenced, naming who; then deleted.
	fails(1, "function api", newSecretCmd, "rm", "db")
	fails(1, "`sless describe secret db` shows the references", newRmCmd, "secret", "db")
	fails(1, "`sless ls secrets` lists them", newSecretCmd, "rm", "nope")
	if err := d.c.DeleteTrigger(ctx, d.ns, "orders"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.UpdateFunction(ctx, d.ns, "api", api.FunctionFields{SecretEnv: &[]api.SecretEnv{}, SecretFiles: &[]api.SecretFile{}}); err != nil {
		t.Fatal(err)
	}
	mustContain(t, "secret rm", ok(newSecretCmd, "rm", "db"), "secret db deleted")
	mustContain(t, "rm secret", ok(newRmCmd, "secret", "other"), "secret other deleted")
	mustContain(t, "secret ls, none", ok(newSecretCmd, "ls"), "no secrets in namespace "+d.ns)

	b64 := base64.StdEncoding.EncodeToString(binary)
	for _, s := range said {
		if strings.Contains(s, "marker-") || strings.Contains(s, b64) {
			t.Errorf("the CLI showed a value:\n%s", s)
		}
	}
}

// TestSecretKind: secrets are a kind of the generic verbs, by any of their names, and the
// table shows keys and versions.
func TestSecretKind(t *testing.T) {
	for _, name := range []string{"secret", "secrets", "sec"} {
		if k, err := kindNamed(name); err != nil || k.names()[0] != "secret" {
			t.Errorf("kindNamed(%q) = %v, %v", name, k, err)
		}
	}
	if _, err := kindNamed("bogus"); exitCodeOf(err) != exitUsage || !strings.Contains(err.Error(), "want functions, triggers, jobs or secrets") {
		t.Errorf("kindNamed(bogus): %v", err)
	}
	now := time.Now()
	tb := secretKind.table(
		api.Secret{Name: "db", Version: 3, Keys: []string{"password", "user"}, CreatedAt: now.Add(-2 * time.Hour), UpdatedAt: now.Add(-time.Minute)},
		api.Secret{Name: "many", Version: 1, Keys: []string{"a", "b", "c", "d", "e", "f"}, CreatedAt: now, UpdatedAt: now})
	want := [][]string{{"db", "password,user", "3", "1m", "2h"}, {"many", "a,b,c,d,… (+2)", "1", "0s", "0s"}}
	if !slices.EqualFunc(tb.rows, want, slices.Equal[[]string]) {
		t.Errorf("rows %q, want %q", tb.rows, want)
	}
}
