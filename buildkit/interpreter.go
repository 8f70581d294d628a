package buildkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/mod/semver"
)

// Local builds and `sless dev` run functions with this machine's own interpreters, so a
// runtime is usable only where its version is installed: python3.12 must never run on
// Python 3.11 without a word.

// RuntimeMissingError says this machine lacks what a runtime needs, and how to get it.
type RuntimeMissingError struct {
	Runtime string
	Need    string // e.g. "Python 3.12"
	Found   string // what was found instead, "" for nothing
	Fix     string
}

func (e *RuntimeMissingError) Error() string {
	found := "none is installed"
	if e.Found != "" {
		found = "found " + e.Found
	}
	return fmt.Sprintf("runtime %s needs %s on this machine (local builds run functions with the machine's own interpreter), but %s: %s", e.Runtime, e.Need, found, e.Fix)
}

var interpreters sync.Map // runtime name → interpreterResult

type interpreterResult struct {
	path string
	err  error
}

// Interpreter returns the absolute path of the program that runs rt's functions on this
// machine (python3.X, node, go), checked to be rt's version. Version managers' shims are
// resolved to the real executable: pyenv's shim costs ~400 ms on every start.
func Interpreter(rt Runtime) (string, error) {
	if r, ok := interpreters.Load(rt.Name); ok {
		res := r.(interpreterResult)
		return res.path, res.err
	}
	path, err := findInterpreter(rt)
	interpreters.Store(rt.Name, interpreterResult{path, err})
	return path, err
}

func findInterpreter(rt Runtime) (string, error) {
	switch rt.Language {
	case LanguagePython:
		return findPython(rt)
	case LanguageNode:
		return findNode(rt)
	}
	return findGo(rt)
}

func findPython(rt Runtime) (string, error) {
	name := "python" + rt.Version
	candidates := []string{name}
	// pyenv keeps versions that are installed but not selected out of PATH.
	root := os.Getenv("PYENV_ROOT")
	if root == "" {
		if home, err := os.UserHomeDir(); err == nil {
			root = filepath.Join(home, ".pyenv")
		}
	}
	if found, _ := filepath.Glob(filepath.Join(root, "versions", rt.Version+".*", "bin", name)); len(found) > 0 {
		slices.Sort(found)
		candidates = append(candidates, found[len(found)-1])
	}
	var seen string
	for _, c := range candidates {
		out, err := exec.Command(c, "-S", "-c", "import sys; print(sys.executable); print('%d.%d' % sys.version_info[:2])").Output()
		if err != nil {
			continue
		}
		path, version, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		if version == rt.Version && filepath.IsAbs(path) {
			return path, nil
		}
		seen = "Python " + version
	}
	return "", &RuntimeMissingError{Runtime: rt.Name, Need: "Python " + rt.Version, Found: seen,
		Fix: fmt.Sprintf("install it (e.g. pyenv install %s, or your system's python%s package) and put %s on PATH, or use another runtime", rt.Version, rt.Version, name)}
}

// findNode takes node, or node<major> (a second Node.js beside the default one), whichever
// is rt's major version.
func findNode(rt Runtime) (string, error) {
	var seen string
	for _, c := range []string{"node", "node" + rt.Version} {
		out, err := exec.Command(c, "-p", "process.execPath + '\\n' + process.versions.node").Output()
		if err != nil {
			continue
		}
		path, version, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		if major, _, _ := strings.Cut(version, "."); major == rt.Version {
			return path, nil
		}
		if seen == "" {
			seen = version
		}
	}
	if seen == "" {
		return "", &RuntimeMissingError{Runtime: rt.Name, Need: "Node.js " + rt.Version,
			Fix: "install Node.js " + rt.Version + " and put node on PATH"}
	}
	major, _, _ := strings.Cut(seen, ".")
	return "", &RuntimeMissingError{Runtime: rt.Name, Need: "Node.js " + rt.Version, Found: "Node.js " + seen + " as node",
		Fix: "put Node.js " + rt.Version + "'s node first on PATH (e.g. with nvm use " + rt.Version + ") or on PATH as node" + rt.Version + ", or use the runtime nodejs" + major}
}

// findGo accepts any local Go at least as new as rt's: Go builds older language versions.
func findGo(rt Runtime) (string, error) {
	out, err := exec.Command("go", "env", "GOVERSION").Output()
	version := strings.TrimPrefix(strings.TrimSpace(string(out)), "go")
	if err != nil || !semver.IsValid("v"+version) {
		return "", &RuntimeMissingError{Runtime: rt.Name, Need: "Go " + rt.Version + " or newer",
			Fix: "install Go and put go on PATH"}
	}
	if semver.Compare("v"+version, "v"+rt.Version) < 0 {
		return "", &RuntimeMissingError{Runtime: rt.Name, Need: "Go " + rt.Version + " or newer", Found: "Go " + version,
			Fix: "install a newer Go"}
	}
	return exec.LookPath("go")
}
