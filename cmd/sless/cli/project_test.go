package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/test/testkit"
)

// fakeAPI answers what `sless deploy --wait=false` asks: whoami, the function (404 unless
// existing is set), its create or update, the upload; and `sless usage`'s read. It records
// the create, update and upload bodies and the usage queries.
type fakeAPI struct {
	mu       sync.Mutex
	existing *api.Function
	created  []api.CreateFunction
	updated  []api.FunctionFields
	uploads  [][]byte
	// usage answers GET .../usage; usageQueries are the queries it got.
	usage        api.Usage
	usageQueries []url.Values
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	const fn = "/v1/namespaces/ns/functions"
	reply := func(v any) { w.Header().Set("Content-Type", "application/json"); _ = json.NewEncoder(w).Encode(v) }
	switch {
	case r.URL.Path == "/v1/whoami":
		reply(api.Identity{Subject: "dev", Namespace: "ns"})
	case r.Method == http.MethodPost && r.URL.Path == fn:
		var c api.CreateFunction
		_ = json.NewDecoder(r.Body).Decode(&c)
		f.created = append(f.created, c)
		w.WriteHeader(http.StatusCreated)
		reply(api.Function{Name: c.Name})
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, fn+"/"):
		if f.existing == nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"function not found"}`))
			return
		}
		reply(f.existing)
	case r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, fn+"/"):
		var u api.FunctionFields
		_ = json.NewDecoder(r.Body).Decode(&u)
		f.updated = append(f.updated, u)
		reply(f.existing)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/namespaces/ns/usage":
		f.usageQueries = append(f.usageQueries, r.URL.Query())
		reply(f.usage)
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/upload"):
		body, _ := io.ReadAll(r.Body)
		f.uploads = append(f.uploads, body)
		reply(api.Function{FunctionSpec: api.FunctionSpec{Source: &api.Source{SHA256: "0123456789abcdef"}}})
	default:
		http.Error(w, `{"error":"unexpected"}`, http.StatusTeapot)
	}
}

// startFakeAPI serves a fakeAPI for the test and points the CLI at it.
func startFakeAPI(t *testing.T) *fakeAPI {
	fake := &fakeAPI{}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("SLESS_ENDPOINT", srv.URL)
	t.Setenv("SLESS_TOKEN", "token")
	return fake
}

// TestDeployTakesTheRuntimeOfInit: `sless init --runtime python3.12` then `sless deploy`
// creates a python3.12 function (not the python3.11 detected from handler.py); --runtime on
// deploy wins; an existing function keeps its runtime; a broken sless.yaml is a usage error.
func TestDeployTakesTheRuntimeOfInit(t *testing.T) {
	fake := startFakeAPI(t)

	dir := filepath.Join(t.TempDir(), "h")
	if out, err := testkit.RunCommand(t, newInitCmd, dir, "--runtime", "python3.12"); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	deploy := func(args ...string) (string, error) {
		return testkit.RunCommand(t, newDeployCmd, append([]string{dir, "--wait=false"}, args...)...)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "python3.12"},
		{[]string{"--runtime", "python3.11"}, "python3.11"},
		{[]string{"--runtime", "python"}, "python3.11"},
	} {
		fake.created = nil
		out, err := deploy(tc.args...)
		if err != nil || len(fake.created) != 1 || fake.created[0].Runtime == nil || *fake.created[0].Runtime != tc.want {
			t.Fatalf("deploy %q: %v %+v\n%s", tc.args, err, fake.created, out)
		}
		if !strings.Contains(out, "function h created ("+tc.want+")") {
			t.Errorf("deploy %q said:\n%s", tc.args, out)
		}
	}

	// A language name in sless.yaml, as with init --runtime python.
	if err := os.WriteFile(filepath.Join(dir, projectFile), []byte("runtime: python\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fake.created = nil
	if _, err := deploy(); err != nil || *fake.created[0].Runtime != "python3.11" {
		t.Fatalf("runtime: python: %v %+v", err, fake.created)
	}

	fake.existing = &api.Function{Name: "h", FunctionSpec: api.FunctionSpec{Runtime: "python3.11"}}
	fake.created = nil
	if err := os.WriteFile(filepath.Join(dir, projectFile), projectYAML("python3.12"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := deploy(); err != nil || len(fake.created) != 0 || len(fake.updated) != 0 {
		t.Fatalf("an existing function: %v, created %+v, updated %+v\n%s", err, fake.created, fake.updated, out)
	}
	fake.existing = nil

	for _, bad := range []string{"runtime: cobol\n", "runtime: [1\n", "runtme: python3.12\n"} {
		if err := os.WriteFile(filepath.Join(dir, projectFile), []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := deploy(); exitCodeOf(err) != ExitUsage || !strings.Contains(err.Error(), projectFile) {
			t.Errorf("sless.yaml %q: %v, want a usage error naming it", bad, err)
		}
	}
}

// TestInitHelpStatesTheLanguageRuntimes: the help says which runtime a language stands for,
// as the code picks it.
func TestInitHelpStatesTheLanguageRuntimes(t *testing.T) {
	cmd := newInitCmd()
	help := cmd.Long + " " + cmd.Flags().Lookup("runtime").Usage
	if strings.Contains(help, "newest") {
		t.Errorf("the help promises the newest runtime: %s", help)
	}
	for lang, rt := range languageRuntimes {
		if got, err := lookupRuntime(string(lang)); err != nil || got.Name != rt {
			t.Errorf("%s: %v, %v", lang, got.Name, err)
		}
		if !strings.Contains(help, string(lang)+" for "+rt) {
			t.Errorf("the help does not say %s stands for %s: %s", lang, rt, help)
		}
	}
}

// TestBoolFlagsTakeNoValue: no switch of any command shows a value name in --help (a
// `backquoted` word in a flag's usage becomes one: "--login sless login").
func TestBoolFlagsTakeNoValue(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if name, _ := pflag.UnquoteUsage(f); f.Value.Type() == "bool" && name != "" {
				t.Errorf("%s --%s shows as taking a value %q: %s", c.CommandPath(), f.Name, name, f.Usage)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	for _, mk := range subcommands {
		walk(mk())
	}
}
