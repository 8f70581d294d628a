package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/buildkit/sourcezip"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
)

// The source folder of `sless deploy`: which runtime it is for. What goes into its zip is
// sourcezip's, shared with the Terraform provider.

// projectFile is what `sless init` chose for the folder, for `sless deploy`: the runtime a
// new function is created with, and the secrets the function reads. The upload leaves it out.
const projectFile = sourcezip.ProjectFile

// project is the content of projectFile.
type project struct {
	// Runtime is a runtime name (python3.12) or a language (python).
	Runtime string `json:"runtime,omitempty"`
	// SecretEnv and SecretFiles are the function's references to secrets (names, never
	// values), sent on every deploy; nil when the file does not have them, so that the
	// function keeps its own.
	SecretEnv   *[]api.SecretEnv  `json:"secret_env,omitempty"`
	SecretFiles *[]api.SecretFile `json:"secret_files,omitempty"`
}

// addSecretRefs puts the project's secret_env and secret_files into fields, with the flags'
// entries (already in fields) merged over them: one for the same variable, or for the same
// secret's files, replaces the file's.
func (p project) addSecretRefs(fields *api.FunctionFields) {
	if p.SecretEnv != nil {
		merged := append([]api.SecretEnv{}, *p.SecretEnv...)
		if fields.SecretEnv != nil {
			for _, e := range *fields.SecretEnv {
				merged = mergeSecretEnv(merged, e)
			}
		}
		fields.SecretEnv = &merged
	}
	if p.SecretFiles != nil {
		merged := append([]api.SecretFile{}, *p.SecretFiles...)
		if fields.SecretFiles != nil {
			for _, f := range *fields.SecretFiles {
				merged = mergeSecretFile(merged, f)
			}
		}
		fields.SecretFiles = &merged
	}
}

// projectYAML is the projectFile `sless init` writes.
func projectYAML(runtime string) []byte {
	return []byte(`# Read by sless deploy: the runtime it creates this function with (go, python, node or a
# runtime name such as python3.12). --runtime overrides it; an existing function keeps its
# runtime unless --runtime changes it.
runtime: ` + runtime + `

# The secrets of the namespace it reads (sless secret create), by name; every deploy sends
# these lists, with --secret-env and --secret-file merged over them:
# secret_env:
#   - {name: DB_PASSWORD, secret: db, key: password}
# secret_files:
#   - {secret: tls}    # each key of tls a file in ` + rules.SecretMountDir + `/tls
`)
}

// loadProject reads dir's projectFile; without one, the project is empty.
func loadProject(dir string) (project, error) {
	var p project
	data, err := os.ReadFile(filepath.Join(dir, projectFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return p, nil
	case err != nil:
		return p, fmt.Errorf("reading %s: %w", projectFile, err)
	}
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		return p, usageErrorf("%s: %v; it holds runtime (e.g. runtime: python3.12), secret_env (a list of {name, secret, key}) and secret_files (a list of {secret, path})", filepath.Join(dir, projectFile), err)
	}
	if p.SecretEnv != nil {
		for i, e := range *p.SecretEnv {
			if err := checkSecretEnv(e); err != nil {
				return p, usageErrorf("%s: secret_env[%d]: %v", filepath.Join(dir, projectFile), i, err)
			}
		}
	}
	if p.SecretFiles != nil {
		for i, f := range *p.SecretFiles {
			if err := checkSecretFile(f); err != nil {
				return p, usageErrorf("%s: secret_files[%d]: %v", filepath.Join(dir, projectFile), i, err)
			}
		}
	}
	if p.Runtime != "" {
		if _, err := lookupRuntime(p.Runtime); err != nil {
			return p, usageErrorf("%s: %w", filepath.Join(dir, projectFile), err)
		}
	}
	return p, nil
}

// newRuntime is the runtime a new function is created with when --runtime is not given: the
// one dir's projectFile names, else the one of the language detected from the files.
func newRuntime(dir string) (string, error) {
	p, err := loadProject(dir)
	if err != nil {
		return "", err
	}
	if p.Runtime != "" {
		rt, err := lookupRuntime(p.Runtime)
		return rt.Name, err
	}
	lang, err := detectLanguage(dir)
	if err != nil {
		return "", err
	}
	return languageRuntimes[lang], nil
}

// detectLanguage tells the language from the files at the top of dir: go.mod or .go files,
// handler.py or requirements.txt, handler.js or package.json.
func detectLanguage(dir string) (buildkit.Language, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", dir, err)
	}
	found := map[buildkit.Language]bool{}
	for _, e := range entries {
		switch n := e.Name(); {
		case n == "go.mod" || strings.HasSuffix(n, ".go"):
			found[buildkit.LanguageGo] = true
		case n == "handler.py" || n == "requirements.txt":
			found[buildkit.LanguagePython] = true
		case n == "handler.js" || n == "package.json":
			found[buildkit.LanguageNode] = true
		}
	}
	langs := slices.Sorted(maps.Keys(found))
	switch len(langs) {
	case 1:
		return langs[0], nil
	case 0:
		return "", usageErrorf("%s has no go.mod, *.go, handler.py or handler.js: pass --runtime (or name it in %s), or deploy the folder of your function", dir, projectFile)
	}
	return "", usageErrorf("%s holds code of several languages (%v): pass --runtime", dir, langs)
}
