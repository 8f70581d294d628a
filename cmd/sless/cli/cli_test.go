package cli

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/utils/ptr"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/buildkit/sourcezip"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/test/testkit"
)

func exitCodeOf(err error) int {
	if err == nil {
		return 0
	}
	return ExitCode(err)
}

// parseCase is one input of a flag parser: the value it gives, or (code) its error's exit code.
type parseCase[T any] struct {
	in   []string
	want T
	code int
}

// checkParses runs parse on each case, reporting as name(in) each that comes out otherwise.
func checkParses[T any](t *testing.T, name string, parse func([]string) (T, error), cases []parseCase[T]) {
	t.Helper()
	for _, tc := range cases {
		got, err := parse(tc.in)
		if code := exitCodeOf(err); code != tc.code || (err == nil && !reflect.DeepEqual(got, tc.want)) {
			t.Errorf("%s(%q) = %+v, %v (exit %d); want %+v, exit %d", name, tc.in, got, err, code, tc.want, tc.code)
		}
	}
}

func TestParseHeaders(t *testing.T) {
	checkParses(t, "parseHeaders", parseHeaders, []parseCase[http.Header]{
		{in: nil, want: http.Header{}},
		{in: []string{"X-A: b", "x-a:c", "content-type:  text/plain "}, want: http.Header{"X-A": {"b", "c"}, "Content-Type": {"text/plain"}}},
		{in: []string{"Authorization: Bearer a:b"}, want: http.Header{"Authorization": {"Bearer a:b"}}},
		{in: []string{"X-Empty:"}, want: http.Header{"X-Empty": {""}}},
		{in: []string{"no colon"}, code: ExitUsage},
		{in: []string{": v"}, code: ExitUsage},
		{in: []string{"Two words: v"}, code: ExitUsage},
	})
}

func TestReadBody(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "event.json")
	if err := os.WriteFile(file, []byte(`{"from":"file"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	pipeR, pipeW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	_, _ = pipeW.WriteString(`{"from":"pipe"}`)
	pipeW.Close()
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	for _, tc := range []struct {
		name, data string
		stdin      *os.File
		want       string
		none       bool
		code       int
	}{
		{name: "text", data: `{"a":1}`, stdin: devNull, want: `{"a":1}`},
		{name: "file", data: "@" + file, stdin: devNull, want: `{"from":"file"}`},
		{name: "missing file", data: "@" + filepath.Join(dir, "nope.json"), stdin: devNull, code: ExitUsage},
		{name: "@- reads stdin", data: "@-", stdin: pipeR, want: `{"from":"pipe"}`},
		{name: "a terminal-like stdin is not read", stdin: devNull, none: true},
	} {
		got, err := readBody(tc.data, tc.stdin)
		if code := exitCodeOf(err); code != tc.code || (err == nil && (string(got) != tc.want || (got == nil) != tc.none)) {
			t.Errorf("%s: readBody = %q, %v; want %q (none %v), exit %d", tc.name, got, err, tc.want, tc.none, tc.code)
		}
	}
	// Without -d, a pipe is the body.
	r, w, _ := os.Pipe()
	_, _ = w.WriteString("piped")
	w.Close()
	if got, err := readBody("", r); err != nil || string(got) != "piped" {
		t.Errorf("stdin pipe without -d: %q, %v", got, err)
	}
	if got, err := readBody("", strings.NewReader("")); err != nil || got != nil {
		t.Errorf("empty stdin: %q, %v; want no body", got, err)
	}
}

func TestParseEnv(t *testing.T) {
	checkParses(t, "parseEnv", parseEnv, []parseCase[map[string]string]{
		{in: nil, want: map[string]string{}},
		{in: []string{"A=1", "B=x=y", "C=", "A=2"}, want: map[string]string{"A": "2", "B": "x=y", "C": ""}},
		{in: []string{"A=1,B=2"}, want: map[string]string{"A": "1,B=2"}},
		{in: []string{"NOVALUE"}, code: ExitUsage},
		{in: []string{"=v"}, code: ExitUsage},
	})
}

// TestDeployFlags: only the flags given become fields; --env, --secret-env, --secret-file,
// --timeout and --runtime are checked before anything is sent.
func TestDeployFlags(t *testing.T) {
	deployFields := func(args []string) (api.FunctionFields, error) {
		cmd := &cobra.Command{}
		var f deployFlags
		f.bind(cmd)
		if err := cmd.ParseFlags(args); err != nil {
			return api.FunctionFields{}, err
		}
		return f.fields(cmd)
	}
	checkParses(t, "deploy", deployFields, []parseCase[api.FunctionFields]{
		{in: nil, want: api.FunctionFields{}},
		{in: []string{"--runtime", "python"}, want: api.FunctionFields{Runtime: ptr.To("python3.11")}},
		{in: []string{"--runtime", "nodejs22", "--timeout", "1500ms", "--memory", "256"},
			want: api.FunctionFields{Runtime: ptr.To("nodejs22"), TimeoutSec: ptr.To(int32(2)), MemoryMB: ptr.To(int32(256))}},
		{in: []string{"--timeout", "0", "--entrypoint", ""}, want: api.FunctionFields{TimeoutSec: ptr.To(int32(0)), Entrypoint: ptr.To("")}},
		{in: []string{"--env", "A=1", "--env", "B=2"}, want: api.FunctionFields{EnvVars: &map[string]string{"A": "1", "B": "2"}}},
		{in: []string{"--secret-env", "DB_PASSWORD=db/password", "--secret-env", "A=s/k", "--secret-env", "DB_PASSWORD=db2/pw"},
			want: api.FunctionFields{SecretEnv: &[]api.SecretEnv{{Name: "DB_PASSWORD", Secret: "db2", Key: "pw"}, {Name: "A", Secret: "s", Key: "k"}}}},
		{in: []string{"--secret-file", "db", "--secret-file", "tls:/srv/tls"},
			want: api.FunctionFields{SecretFiles: &[]api.SecretFile{{Secret: "db"}, {Secret: "tls", Path: "/srv/tls"}}}},
		{in: []string{"--env", "A"}, code: ExitUsage},
		{in: []string{"--secret-env", "DB_PASSWORD"}, code: ExitUsage},
		{in: []string{"--secret-file", "db:srv"}, code: ExitUsage},
		{in: []string{"--runtime", "cobol"}, code: ExitUsage},
		{in: []string{"--timeout", "-1s"}, code: ExitUsage},
	})
}

func TestTable(t *testing.T) {
	var b bytes.Buffer
	tb := table{header: []string{"NAME", "URL", "AGE"}, rows: [][]string{
		{"hello", "http://x/fn/ns/hello", "5m"},
		{"a-much-longer-name", "", "12h"},
		{"tabs\tand\nlines", "u", "1d"},
	}}
	if err := tb.write(&b); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"NAME                 URL                    AGE\n" +
		"hello                http://x/fn/ns/hello   5m\n" +
		"a-much-longer-name   -                      12h\n" +
		"tabs and lines       u                      1d\n"
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestOutputFormats(t *testing.T) {
	fn := api.Function{Name: "hello", FunctionSpec: api.FunctionSpec{Runtime: "go1.25"}, Status: api.FunctionStatus{Phase: "Ready"}}
	for format, want := range map[string]string{
		formatJSON:  "{\n  \"name\": \"hello\",",
		formatYAML:  "name: hello\n",
		formatTable: "NAME",
	} {
		o := &outputFlag{format: format, allowed: []string{formatTable, formatJSON, formatYAML}}
		var b bytes.Buffer
		if err := o.write(&b, fn, functionKind.table(fn).write); err != nil || !strings.Contains(b.String(), want) {
			t.Errorf("-o %s: %q, %v; want it to contain %q", format, b.String(), err, want)
		}
	}
	if err := (&outputFlag{format: "xml", allowed: []string{formatTable, formatJSON}}).check(); exitCodeOf(err) != ExitUsage {
		t.Errorf("-o xml: %v", err)
	}
}

func TestAge(t *testing.T) {
	now := time.Date(2025, 1, 10, 12, 0, 0, 0, time.UTC)
	for d, want := range map[time.Duration]string{
		0: "0s", 45 * time.Second: "45s", 12 * time.Minute: "12m", 3 * time.Hour: "3h", 47 * time.Hour: "47h", 72 * time.Hour: "3d", -time.Second: "0s",
	} {
		if got := age(now.Add(-d), now); got != want {
			t.Errorf("age(%s) = %s, want %s", d, got, want)
		}
	}
	if age(time.Time{}, now) != "" {
		t.Error("a zero time has no age")
	}
}

func TestPhaseOf(t *testing.T) {
	for _, tc := range []struct {
		st   api.FunctionStatus
		want string
	}{
		{api.FunctionStatus{}, "Pending"},
		{api.FunctionStatus{Phase: "Ready", Ready: true}, "Ready"},
		{api.FunctionStatus{Phase: "Ready", Message: "applying the latest change"}, "applying the latest change"},
		{api.FunctionStatus{Phase: "Building", Message: "building abc"}, "Building (building abc)"},
	} {
		if got := phaseOf(tc.st); got != tc.want {
			t.Errorf("phaseOf(%+v) = %q, want %q", tc.st, got, tc.want)
		}
	}
}

// TestDeployUploadsTheSharedZip: `sless deploy` uploads exactly sourcezip's zip of the
// folder (the bytes the Terraform provider uploads for it; the ignore rules are tested
// there), and a symbolic link it would upload is refused before anything is sent.
func TestDeployUploadsTheSharedZip(t *testing.T) {
	fake := startFakeAPI(t)
	dir := t.TempDir()
	for name, content := range map[string]string{
		"handler.py":              "def handle(event):\n    return event\n",
		"lib/util.py":             "x",
		"node_modules/m/index.js": "x",
		"sless.yaml":              "runtime: python3.12\n",
		"build.log":               "x",
		sourcezip.IgnoreFile:      "*.log\n",
	} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, n, err := sourcezip.Zip(dir)
	if err != nil || n != 3 {
		t.Fatalf("sourcezip.Zip: %d files, %v", n, err)
	}
	out, err := testkit.RunCommand(t, newDeployCmd, dir, "--name", "h", "--wait=false")
	if err != nil || len(fake.uploads) != 1 || !bytes.Equal(fake.uploads[0], want) {
		t.Fatalf("deploy: %v, %d uploads (equal to sourcezip's: %v)\n%s", err, len(fake.uploads), len(fake.uploads) == 1 && bytes.Equal(fake.uploads[0], want), out)
	}
	if !strings.Contains(out, "uploaded 3 files") {
		t.Errorf("deploy said:\n%s", out)
	}
	// The upload validator takes what deploy zips.
	if _, err := buildkit.OpenArchive(bytes.NewReader(want), int64(len(want)), buildkit.DefaultLimits()); err != nil {
		t.Errorf("the upload validator refuses the zip: %v", err)
	}
	if err := os.Symlink("handler.py", filepath.Join(dir, "link.py")); err != nil {
		t.Fatal(err)
	}
	if out, err := testkit.RunCommand(t, newDeployCmd, dir, "--name", "h", "--wait=false"); err == nil || !strings.Contains(err.Error(), "link.py") || len(fake.uploads) != 1 {
		t.Errorf("deploy with a symbolic link: %v, %d uploads\n%s", err, len(fake.uploads), out)
	}
}

func TestDetectLanguage(t *testing.T) {
	for _, tc := range []struct {
		files []string
		want  buildkit.Language
		code  int
	}{
		{files: []string{"go.mod", "handler.go"}, want: buildkit.LanguageGo},
		{files: []string{"main.go"}, want: buildkit.LanguageGo},
		{files: []string{"handler.py", "README.md"}, want: buildkit.LanguagePython},
		{files: []string{"requirements.txt"}, want: buildkit.LanguagePython},
		{files: []string{"package.json", "src/index.js"}, want: buildkit.LanguageNode},
		{files: []string{"handler.js"}, want: buildkit.LanguageNode},
		{files: []string{"README.md"}, code: ExitUsage},
		{files: []string{"handler.py", "handler.js"}, code: ExitUsage},
	} {
		dir := t.TempDir()
		for _, f := range tc.files {
			p := filepath.Join(dir, f)
			_ = os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := detectLanguage(dir)
		if code := exitCodeOf(err); code != tc.code || got != tc.want {
			t.Errorf("%q: %q, %v; want %q, exit %d", tc.files, got, err, tc.want, tc.code)
		}
	}
}

// TestInitTemplates: every language has a template, runtime names and languages are
// accepted, and init refuses to overwrite without writing anything.
func TestInitTemplates(t *testing.T) {
	want := map[buildkit.Language][]string{
		buildkit.LanguageGo:     {"go.mod", "handler.go", "sless.yaml"},
		buildkit.LanguagePython: {"handler.py", "sless.yaml"},
		buildkit.LanguageNode:   {"handler.js", "package.json", "sless.yaml"},
	}
	for _, name := range buildkit.RuntimeNames() {
		rt, err := lookupRuntime(name)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), "fn-"+strings.ReplaceAll(name, ".", ""))
		got, err := writeTemplate(dir, rt, initData{Name: filepath.Base(dir), Runtime: rt.Name, GoVersion: rt.Version})
		if err != nil || !slices.Equal(got, want[rt.Language]) {
			t.Fatalf("%s: %q, %v", name, got, err)
		}
		for _, f := range got {
			data, _ := os.ReadFile(filepath.Join(dir, f))
			if strings.Contains(string(data), "{{") {
				t.Errorf("%s/%s: unrendered template:\n%s", name, f, data)
			}
		}
		if p, err := loadProject(dir); err != nil || p.Runtime != name {
			t.Errorf("%s: sless.yaml says %+v, %v", name, p, err)
		}
		if rt.Language == buildkit.LanguageGo {
			if data, _ := os.ReadFile(filepath.Join(dir, "go.mod")); !strings.Contains(string(data), "go "+rt.Version+"\n") {
				t.Errorf("%s go.mod:\n%s", name, data)
			}
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	rt, _ := lookupRuntime("node")
	if _, err := writeTemplate(dir, rt, initData{Name: "x"}); err == nil || !strings.Contains(err.Error(), "package.json") {
		t.Fatalf("overwrite: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "handler.js")); !errors.Is(err, os.ErrNotExist) {
		t.Error("a refused init wrote handler.js")
	}
	if _, err := lookupRuntime("java"); exitCodeOf(err) != ExitUsage {
		t.Errorf("--runtime java: %v", err)
	}
}

func TestRefused(t *testing.T) {
	for _, tc := range []struct {
		status  int
		proxied bool
		want    bool
	}{
		{404, false, true}, {503, false, true}, {401, false, true},
		{404, true, false}, {500, true, false}, {200, false, false},
		{502, false, false}, {504, false, false},
	} {
		resp := &http.Response{StatusCode: tc.status, Header: http.Header{}}
		if tc.proxied {
			resp.Header.Set("X-Sless-Cold-Start", "false")
		}
		if got := refused(resp); got != tc.want {
			t.Errorf("refused(%d, proxied %v) = %v", tc.status, tc.proxied, got)
		}
	}
}
