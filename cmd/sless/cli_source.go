package main

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"sless.dev/sless/buildkit"
)

// The source folder of `sless deploy`: what goes into the zip and which runtime it is for.

// ignoreFile lists more paths to leave out of the upload, one pattern a line.
const ignoreFile = ".slessignore"

// defaultIgnore is left out of every upload: version control data, dependency folders the
// build installs itself (the upload limits reject them too), caches, the data folder of
// a `sless dev` started in the function's folder, and the folder's own sless.yaml.
var defaultIgnore = []string{".git/", ".hg/", ".svn/", "node_modules/", ".venv/", "__pycache__/", ".sless/", ".DS_Store", "/" + projectFile}

// projectFile is what `sless init` chose for the folder, for `sless deploy`: the runtime a
// new function is created with.
const projectFile = "sless.yaml"

// project is the content of projectFile.
type project struct {
	// Runtime is a runtime name (python3.12) or a language (python).
	Runtime string `json:"runtime,omitempty"`
}

// projectYAML is the projectFile `sless init` writes.
func projectYAML(runtime string) []byte {
	return []byte(`# Read by sless deploy: the runtime it creates this function with (go, python, node or a
# runtime name such as python3.12). --runtime overrides it; an existing function keeps its
# runtime unless --runtime changes it.
runtime: ` + runtime + "\n")
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
		return p, usageErrorf("%s: %v; it holds one setting, e.g. runtime: python3.12", filepath.Join(dir, projectFile), err)
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

// ignoreRule is one pattern of path.Match syntax. A pattern with a slash matches the whole
// slash-separated path from the folder's root, one without matches any file or folder of
// that name; a trailing slash matches folders only.
type ignoreRule struct {
	pattern           string
	dirOnly, anchored bool
}

func parseIgnore(lines []string) ([]ignoreRule, error) {
	var rules []ignoreRule
	for i, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(l, "!") {
			return nil, fmt.Errorf("%s line %d: %q: negation (!) is not supported; narrow the patterns instead", ignoreFile, i+1, l)
		}
		r := ignoreRule{}
		l, r.dirOnly = strings.CutSuffix(l, "/")
		r.pattern = strings.TrimPrefix(l, "/")
		r.anchored = strings.Contains(l, "/")
		if _, err := path.Match(r.pattern, ""); err != nil {
			return nil, fmt.Errorf("%s line %d: %q: %w", ignoreFile, i+1, l, err)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

func (r ignoreRule) match(rel string, isDir bool) bool {
	if r.dirOnly && !isDir {
		return false
	}
	if !r.anchored {
		rel = path.Base(rel)
	}
	ok, _ := path.Match(r.pattern, rel)
	return ok
}

// loadIgnore is the default rules plus those of dir's .slessignore, if any.
func loadIgnore(dir string) ([]ignoreRule, error) {
	lines := slices.Clone(defaultIgnore)
	data, err := os.ReadFile(filepath.Join(dir, ignoreFile))
	switch {
	case err == nil:
		lines = append(lines, strings.Split(string(data), "\n")...)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("reading %s: %w", ignoreFile, err)
	}
	return parseIgnore(lines)
}

// zipSource zips the regular files under dir that no rule ignores, with slash-separated
// relative names and their modes (executables stay executable). Symbolic links are left out:
// uploads may not hold them.
func zipSource(dir string) (data []byte, files int, err error) {
	rules, err := loadIgnore(dir)
	if err != nil {
		return nil, 0, err
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		for _, r := range rules {
			if r.match(rel, d.IsDir()) {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h, err := zip.FileInfoHeader(info)
		if err != nil {
			return err
		}
		h.Name, h.Method = rel, zip.Deflate
		w, err := zw.CreateHeader(h)
		if err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		files++
		_, err = io.Copy(w, f)
		return err
	})
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		return nil, 0, fmt.Errorf("zipping %s: %w", dir, err)
	}
	return buf.Bytes(), files, nil
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
