package cli

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"text/template"

	"github.com/spf13/cobra"

	"sless.dev/sless/buildkit"
)

// templates holds a hello function per language, written by `sless init`: text/templates
// over initData, each named after the file it writes plus ".tmpl" (a go.mod or .go file
// there would be a module or package of its own to Go).
//
//go:embed templates
var templates embed.FS

type initData struct {
	Name, Runtime, GoVersion string
}

// languageRuntimes is the runtime a language name stands for (`--runtime go`), and what
// deploy picks when it detects the language from the files.
var languageRuntimes = map[buildkit.Language]string{
	buildkit.LanguageGo:     "go1.25",
	buildkit.LanguagePython: "python3.11",
	buildkit.LanguageNode:   "nodejs20",
}

// languageDefaults words languageRuntimes for the help: "go for go1.25, python for
// python3.11, node for nodejs20".
func languageDefaults() string {
	var parts []string
	for _, lang := range []buildkit.Language{buildkit.LanguageGo, buildkit.LanguagePython, buildkit.LanguageNode} {
		parts = append(parts, string(lang)+" for "+languageRuntimes[lang])
	}
	return strings.Join(parts, ", ")
}

// lookupRuntime accepts a runtime name (python3.12) or a language (python).
func lookupRuntime(name string) (buildkit.Runtime, error) {
	if rt, ok := languageRuntimes[buildkit.Language(name)]; ok {
		name = rt
	}
	rt, ok := buildkit.Runtimes[name]
	if !ok {
		return rt, usageErrorf("--runtime %q: want go, python, node or one of %s", name, strings.Join(buildkit.RuntimeNames(), ", "))
	}
	return rt, nil
}

func init() { subcommands = append(subcommands, newInitCmd) }

func newInitCmd() *cobra.Command {
	var runtime string
	cmd := &cobra.Command{
		Use:   "init <name> --runtime go|python|node",
		Short: "Write a hello function to start from into the folder <name>",
		Long: `init writes a working hello function for the runtime into the folder <name> (created if
needed): handler.go and go.mod for Go, handler.py for Python, handler.js and package.json for
Node.js, and sless.yaml with the runtime, which sless deploy creates the function with. It
never overwrites a file. --runtime takes a language (` + languageDefaults() + `)
or a runtime name: ` + strings.Join(buildkit.RuntimeNames(), ", ") + `.`,
		Example: `  sless init hello --runtime python
  cd hello && sless deploy && sless invoke hello -d '{"name":"you"}'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if runtime == "" {
				return usageErrorf("--runtime is required: go, python or node")
			}
			rt, err := lookupRuntime(runtime)
			if err != nil {
				return err
			}
			dir := args[0]
			written, err := writeTemplate(dir, rt, initData{Name: filepath.Base(dir), Runtime: rt.Name, GoVersion: rt.Version})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "wrote %s in %s\nnext:\n  cd %s\n  sless deploy\n  sless invoke %s -d '{\"name\":\"you\"}'\n",
				strings.Join(written, ", "), dir, dir, filepath.Base(dir))
			return nil
		},
	}
	cmd.Flags().StringVar(&runtime, "runtime", "", "a language ("+languageDefaults()+") or a runtime name ("+strings.Join(buildkit.RuntimeNames(), ", ")+")")
	_ = cmd.RegisterFlagCompletionFunc("runtime", cobra.FixedCompletions(
		append([]string{"go", "python", "node"}, buildkit.RuntimeNames()...), cobra.ShellCompDirectiveNoFileComp))
	return cliCommand(cmd)
}

// writeTemplate renders the language's templates into dir. Every file is checked before any
// is written, so a refusal leaves the folder as it was.
func writeTemplate(dir string, rt buildkit.Runtime, data initData) ([]string, error) {
	root := path.Join("templates", string(rt.Language))
	entries, err := templates.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("no template for %s: %w", rt.Name, err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		t, err := template.ParseFS(templates, path.Join(root, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", e.Name(), err)
		}
		var b bytes.Buffer
		if err := t.Execute(&b, data); err != nil {
			return nil, fmt.Errorf("template %s: %w", e.Name(), err)
		}
		files[strings.TrimSuffix(e.Name(), ".tmpl")] = b.Bytes()
	}
	files[projectFile] = projectYAML(rt.Name)
	names := slices.Sorted(maps.Keys(files))
	var existing []string
	for _, n := range names {
		if _, err := os.Lstat(filepath.Join(dir, n)); err == nil {
			existing = append(existing, n)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	if len(existing) > 0 {
		return nil, fmt.Errorf("%s already has %s: sless init never overwrites files; pick another name or remove them", dir, strings.Join(existing, ", "))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	for _, n := range names {
		// O_EXCL: a file created since the check above is not overwritten either.
		f, err := os.OpenFile(filepath.Join(dir, n), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return nil, fmt.Errorf("writing %s: %w", n, err)
		}
		_, err = f.Write(files[n])
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("writing %s: %w", n, err)
		}
	}
	return names, nil
}
