package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"sless.dev/sless/test/testkit"
)

// runDevCmd starts `sless dev` with args; cancel is Ctrl-C (main turns SIGINT into the
// context's cancellation).
func runDevCmd(t *testing.T, args ...string) (out *testkit.Buffer, cancel func() error) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	out = &testkit.Buffer{}
	cmd := newDevCmd()
	cmd.SetArgs(args)
	cmd.SetOut(out)
	cmd.SetErr(io.Discard)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	var once sync.Once
	var err error
	cancel = func() error {
		once.Do(func() {
			stop()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("sless dev did not stop within 30s of Ctrl-C")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = cancel() })
	return out, cancel
}

var exportRE = regexp.MustCompile(`export (SLESS_ENDPOINT|SLESS_TOKEN)=(\S+)`)

func waitOutput(t *testing.T, out *testkit.Buffer, want string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the output after %s:\n%s", want, timeout, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return out.String()
}

// childrenIn lists processes whose command line mentions dir (the function processes of a
// data directory).
func childrenIn(dir string) []string {
	var found []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(dir)) {
			found = append(found, e.Name()+": "+string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
		}
	}
	return found
}

// TestDevDeploysExamplesStopsCleanlyAndRestarts is `make dev` end to end: the examples are
// deployed through the API and answer on their printed URLs; Ctrl-C leaves no function
// process behind; a restart on the same data directory serves them again.
func TestDevDeploysExamplesStopsCleanlyAndRestarts(t *testing.T) {
	dir := devDataDir(t)
	out, stop := runDevCmd(t, "--data-dir", dir, "--listen", "127.0.0.1:0", "--deploy-examples", filepath.Join("..", "..", "examples"))
	text := waitOutput(t, out, "try: curl", 4*time.Minute)
	vars := map[string]string{}
	for _, m := range exportRE.FindAllStringSubmatch(text, -1) {
		vars[m[1]] = m[2]
	}
	if vars["SLESS_ENDPOINT"] == "" || vars["SLESS_TOKEN"] == "" {
		t.Fatalf("banner without endpoint and token:\n%s", text)
	}
	urls := regexp.MustCompile(`(?m)^  (hello-\w+)\s+(http://\S+)$`).FindAllStringSubmatch(text, -1)
	if len(urls) != 3 {
		t.Fatalf("want the URLs of 3 examples:\n%s", text)
	}
	for _, u := range urls {
		resp, err := http.Post(u[2], "application/json", strings.NewReader(`{"name":"make dev"}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "hello, make dev") {
			t.Fatalf("%s: %d %s", u[1], resp.StatusCode, body)
		}
	}
	for _, path := range []string{"/console", "/v1/openapi.yaml", "/healthz"} {
		resp, err := http.Get(vars["SLESS_ENDPOINT"] + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
	}
	if procs := childrenIn(dir); len(procs) != 3 {
		t.Fatalf("want 3 function processes while running, got %v", procs)
	}
	if err := stop(); err != nil {
		t.Fatalf("sless dev exited with %v", err)
	}
	if procs := childrenIn(dir); len(procs) > 0 {
		t.Fatalf("processes left after Ctrl-C: %v", procs)
	}

	out2, stop2 := runDevCmd(t, "--data-dir", dir, "--listen", "127.0.0.1:0")
	d := sessionOf(t, waitOutput(t, out2, "export SLESS_TOKEN=", time.Minute))
	fns, err := d.c.ListFunctions(context.Background(), d.ns)
	if err != nil || len(fns) != 3 {
		t.Fatalf("functions after restart: %v %v", fns, err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Post(d.endpoint+"/fn/"+d.ns+"/hello-go", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hello-go after restart: %d", resp.StatusCode)
		}
		time.Sleep(100 * time.Millisecond) // Ready again once the build is found by hash
	}
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	if procs := childrenIn(dir); len(procs) > 0 {
		t.Fatalf("processes left after the second Ctrl-C: %v", procs)
	}
}

// TestNetworkOptions: --function-network and --function-egress-allow, read or refused with
// what to fix.
func TestNetworkOptions(t *testing.T) {
	for _, c := range []struct {
		network string
		allow   []string
		want    []string // allowed prefixes
		err     string
	}{
		{network: "isolated"},
		{network: "none"},
		{network: "host"},
		{network: "isolated", allow: []string{"10.1.2.0/24", "192.168.1.7"}, want: []string{"10.1.2.0/24", "192.168.1.7/32"}},
		{network: "isolated", allow: []string{"10.1.2.3/16"}, want: []string{"10.1.0.0/16"}},
		{network: "open", err: "want isolated, none or host"},
		{network: "isolated", allow: []string{"db.local"}, err: "want an IPv4 range"},
		{network: "isolated", allow: []string{"fd00::/8"}, err: "want an IPv4 range"},
		{network: "isolated", allow: []string{"127.0.0.1"}, err: "never reachable"},
		{network: "none", allow: []string{"10.0.0.0/8"}, err: "applies to --function-network isolated only"},
	} {
		o, err := networkOptions(devFlags{network: c.network, egressAllow: c.allow})
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s %v: error %v, want %q", c.network, c.allow, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s %v: %v", c.network, c.allow, err)
			continue
		}
		var got []string
		for _, p := range o.Allow {
			got = append(got, p.String())
		}
		if o.Mode != c.network || strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s %v: %+v, want allow %v", c.network, c.allow, o, c.want)
		}
	}
}

// TestDevMetricsNeedTheToken: sless dev serves /metrics, whose series name every tenant's
// functions, only to the holder of its metrics token: generated into the data directory on
// first use (the banner says how to scrape), or read from --metrics-token-file. Anonymous
// callers and tenants' tokens get 401.
func TestDevMetricsNeedTheToken(t *testing.T) {
	scrape := func(endpoint, authz string) int {
		resp, body := testkit.Get(t, endpoint+"/metrics", "", testkit.Authorization(authz))
		if resp.StatusCode == http.StatusOK && !strings.Contains(string(body), "sless_gateway_requests_total") {
			t.Fatalf("/metrics answered 200 without the gateway's series: %.200s", body)
		}
		return resp.StatusCode
	}
	dir := devDataDir(t)
	out, stop := runDevCmd(t, "--data-dir", dir, "--listen", "127.0.0.1:0")
	banner := waitOutput(t, out, "export SLESS_TOKEN=", time.Minute)
	d := sessionOf(t, banner)
	generated := filepath.Join(dir, "metrics-token")
	token, err := os.ReadFile(generated)
	if err != nil {
		t.Fatalf("no metrics token generated: %v", err)
	}
	if want := `curl -H "Authorization: Bearer $(cat ` + generated + `)" ` + d.endpoint + "/metrics"; !strings.Contains(banner, want) {
		t.Errorf("the banner does not say how to scrape (%s):\n%s", want, banner)
	}
	for authz, want := range map[string]int{"": http.StatusUnauthorized, "Bearer " + d.token: http.StatusUnauthorized,
		"Bearer " + strings.TrimSpace(string(token)): http.StatusOK} {
		if got := scrape(d.endpoint, authz); got != want {
			t.Errorf("GET /metrics with %.20q: %d, want %d", authz, got, want)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	own := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(own, []byte("the-operators-own-metrics-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _ = runDevCmd(t, "--data-dir", dir, "--listen", "127.0.0.1:0", "--metrics-token-file", own)
	d = sessionOf(t, waitOutput(t, out, "export SLESS_TOKEN=", time.Minute))
	for authz, want := range map[string]int{"Bearer " + strings.TrimSpace(string(token)): http.StatusUnauthorized,
		"Bearer the-operators-own-metrics-token": http.StatusOK} {
		if got := scrape(d.endpoint, authz); got != want {
			t.Errorf("with --metrics-token-file, GET /metrics with %.20q: %d, want %d", authz, got, want)
		}
	}
}
