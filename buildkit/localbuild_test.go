package buildkit

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/test/testkit"
)

// runJob runs an artifact once in job mode and returns its stdout.
func runJob(t *testing.T, art *Artifact, event string) string {
	t.Helper()
	cmd := command(art, "SLESS_MODE=job", "SLESS_EVENT="+event)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("job: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

func localBuildZip(t *testing.T, zipData []byte, runtime string) (*Artifact, error) {
	t.Helper()
	needRuntime(t, runtime)
	bc := buildContext(t, zipData, runtime, "")
	return LocalBuild(context.Background(), bc.Data, runtime, filepath.Join(t.TempDir(), "build"))
}

func TestLocalBuildGoCompileErrorIsShown(t *testing.T) {
	zipData := makeZip(t, file("handler.go", "package handler\n\nfunc Handle(event map[string]interface{}) interface{} { return undefinedThing }\n"))
	_, err := localBuildZip(t, zipData, "go1.23")
	var be *BuildError
	if !errors.As(err, &be) {
		t.Fatalf("want a *BuildError, got %v", err)
	}
	if !strings.Contains(be.Output, "undefined: undefinedThing") || !strings.Contains(be.Output, "handler.go:3") {
		t.Errorf("compiler output missing from the error:\n%s", be.Output)
	}
}

func TestLocalBuildNodeInstallsDependencies(t *testing.T) {
	zipData := makeZip(t,
		file("package.json", `{"name":"fn","version":"1.0.0","dependencies":{"ms":"2.1.3"},"devDependencies":{"left-pad":"1.3.0"}}`),
		file("handler.js", "const ms = require('ms');\nexports.handle = (event) => ({ ms: ms(event.duration) });\n"))
	testkit.NeedsHeavy(t, "the npm registry (npm install fetches the dependencies)")
	_, err := exec.LookPath("npm")
	need(t, "npm", err)
	art, err := localBuildZip(t, zipData, "nodejs20")
	if err != nil {
		t.Fatal(err)
	}
	if out := runJob(t, art, `{"duration":"2 days"}`); out != `{"ms":172800000}` {
		t.Errorf("job output = %s", out)
	}
	if _, err := os.Stat(filepath.Join(art.Dir, "handler", "node_modules", "left-pad")); err == nil {
		t.Error("devDependencies were installed")
	}
}

func TestLocalBuildPythonInstallsRequirements(t *testing.T) {
	// PyPI is not reachable here: the requirement is a wheel inside the upload, which pip
	// installs the same way (the Dockerfile runs the same pip command).
	zipData := makeZip(t,
		zipEntry{name: "wheels/greeting-1.0-py3-none-any.whl", body: makeWheel(t, "greeting", "1.0", "def greet(name):\n    return 'hi ' + name\n"), method: zip.Store},
		file("requirements.txt", "# local wheel\n./wheels/greeting-1.0-py3-none-any.whl\n"),
		file("handler.py", "from greeting import greet\n\ndef handle(event):\n    return greet(event['name'])\n"))
	art, err := localBuildZip(t, zipData, "python3.11")
	if err != nil {
		t.Fatal(err)
	}
	if out := runJob(t, art, `{"name":"sless"}`); out != "hi sless" {
		t.Errorf("job output = %s", out)
	}
}

func TestLocalBuildReusesSameContext(t *testing.T) {
	needRuntime(t, "python3.11")
	bc := buildContext(t, makeZip(t, file("handler.py", "def handle(e):\n    return e\n")), "python3.11", "")
	dir := filepath.Join(t.TempDir(), "build")
	first, err := LocalBuild(context.Background(), bc.Data, "python3.11", dir)
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "handler", "marker")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	second, err := LocalBuild(context.Background(), bc.Data, "python3.11", dir)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(first) != fmt.Sprint(second) {
		t.Errorf("artifacts differ: %+v vs %+v", first, second)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Error("the same context was rebuilt")
	}
	other := buildContext(t, makeZip(t, file("handler.py", "def handle(e):\n    return 1\n")), "python3.11", "")
	if _, err := LocalBuild(context.Background(), other.Data, "python3.11", dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("a new source reused the old build")
	}
}

func TestLocalBuildRejectsBadContexts(t *testing.T) {
	if _, err := LocalBuild(context.Background(), []byte("not gzip"), "python3.11", t.TempDir()); err == nil {
		t.Error("garbage accepted")
	}
	if _, err := LocalBuild(context.Background(), nil, "cobol", t.TempDir()); err == nil {
		t.Error("unknown runtime accepted")
	}
}

// makeWheel builds a minimal pure-Python wheel (PEP 427).
func makeWheel(t *testing.T, name, version, code string) []byte {
	t.Helper()
	dist := name + "-" + version + ".dist-info/"
	files := [][2]string{
		{name + "/__init__.py", code},
		{dist + "METADATA", "Metadata-Version: 2.1\nName: " + name + "\nVersion: " + version + "\n"},
		{dist + "WHEEL", "Wheel-Version: 1.0\nGenerator: sless-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var record strings.Builder
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range files {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: f[0], Method: zip.Deflate, Modified: time.Unix(1e9, 0)})
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(f[1]))
		sum := sha256.Sum256([]byte(f[1]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f[0], base64.RawURLEncoding.EncodeToString(sum[:]), len(f[1]))
	}
	record.WriteString(dist + "RECORD,,\n")
	w, _ := zw.Create(dist + "RECORD")
	w.Write([]byte(record.String()))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// needRuntime fails t unless this machine runs runtime's functions: its interpreter (go,
// python3.X or node of the runtime's version), found as `sless dev` finds it. Under -short
// it skips t instead: make test-unit runs with whatever interpreters the machine has, while
// make test has them all (test/tools/deps.sh installs them). An unknown runtime needs
// nothing: refusing it is the test's point.
func needRuntime(t testing.TB, runtime string) {
	t.Helper()
	if rt, ok := Runtimes[runtime]; ok {
		_, err := Interpreter(rt)
		need(t, "runtime "+runtime, err)
	}
}

// need fails t with err, or skips it under -short, when what is missing from the machine.
func need(t testing.TB, what string, err error) {
	t.Helper()
	switch {
	case err == nil:
	case testing.Short():
		t.Skipf("needs %s on this machine: %v", what, err)
	default:
		t.Fatalf("%s: %v (test/tools/deps.sh installs it)", what, err)
	}
}

// TestInterpreter: each runtime runs on its own version or is refused with what to install;
// python3.12 never runs on another Python.
func TestInterpreter(t *testing.T) {
	for _, name := range RuntimeNames() {
		rt := Runtimes[name]
		path, err := Interpreter(rt)
		var missing *RuntimeMissingError
		switch {
		case err == nil:
			if !filepath.IsAbs(path) {
				t.Errorf("%s: interpreter %q is not an absolute path", name, path)
			}
			if rt.Language == LanguagePython {
				out, err := exec.Command(path, "-S", "-c", "import sys; print('%d.%d' % sys.version_info[:2])").Output()
				if err != nil || strings.TrimSpace(string(out)) != rt.Version {
					t.Errorf("%s runs on %s (%q, %v)", name, path, out, err)
				}
			}
		case errors.As(err, &missing):
			if !strings.Contains(err.Error(), missing.Need) || missing.Fix == "" {
				t.Errorf("%s: %v does not say what to install", name, err)
			}
		default:
			t.Errorf("%s: %v", name, err)
		}
	}
	needRuntime(t, "python3.11") // the tests' own runtime
}
