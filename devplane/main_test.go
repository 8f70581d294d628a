package devplane_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/devplane"
	"sless.dev/sless/devplane/pool"
	"sless.dev/sless/gateway"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/client"
	"sless.dev/sless/history"
	"sless.dev/sless/test/testkit"
)

// buildDir is shared by every test: the same source is built once for the whole run.
var buildDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sless-dev-builds")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = dir
	if os.Geteuid() == 0 {
		// Sandboxed Go builds lay it under their caches: compiled once per machine here,
		// before any test's build waits for it within its own bound.
		if err := devplane.WarmSharedCache(context.Background(), devplane.DefaultSharedCacheDir); err != nil {
			fmt.Fprintln(os.Stderr, "warming the shared Go build cache:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	_ = buildkit.Unseal(dir)
	os.RemoveAll(dir)
	os.Exit(code)
}

var hmacKey = []byte("local-backend-test-key-0123456789abcdef")

// dev is one running `sless dev` stack (backend + gateway on a real socket) for a test.
type dev struct {
	t        testing.TB
	dataDir  string
	backend  *devplane.Backend
	srv      *http.Server
	endpoint string
	client   *client.Client
	token    string
	ns       string
	rec      history.Recorder
	reader   history.Reader
	arts     buildkit.Artifacts
	// served counts the requests that reach the gateway's handler.
	served atomic.Int64
}

type devOptions struct {
	dataDir  string
	amqpURL  string
	subject  string
	recorder interface {
		history.Recorder
		history.Reader
	}
	proxy           gateway.ProxyConfig
	conns           gateway.ConnLimits
	maxPerNamespace int
	buildDir        string        // default: the one shared by every test
	retryMax        time.Duration // default: the dev plane's
	callbackHosts   []string
	asyncStore      history.AsyncStore // default: files in the data dir
	logOut          io.Writer          // the platform's own log; default discarded
	noSandbox       bool               // functions run as this process's user even as root
	stopGrace       time.Duration      // a replaced process's drain; default 2 s
	network         pool.NetworkOptions
}

func startDev(t testing.TB, o devOptions) *dev {
	t.Helper()
	if o.dataDir == "" {
		o.dataDir = t.TempDir()
	}
	if o.subject == "" {
		o.subject = "test-" + randomHex(t)
	}
	if o.recorder == nil {
		o.recorder = history.NewMemory(10000)
	}
	if o.logOut == nil {
		o.logOut = io.Discard
		if testing.Verbose() {
			o.logOut = os.Stderr
		}
	}
	log := slog.New(slog.NewTextHandler(o.logOut, nil))
	store, err := buildkit.NewFSStore(filepath.Join(o.dataDir, "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	arts := buildkit.Artifacts{Store: store}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + ln.Addr().String()
	if o.buildDir == "" {
		o.buildDir = buildDir
	}
	if o.stopGrace == 0 {
		o.stopGrace = 2 * time.Second
	}
	b, err := devplane.New(devplane.Options{DataDir: o.dataDir, BuildDir: o.buildDir, Artifacts: arts, GatewayURL: endpoint, RetryMax: o.retryMax,
		AMQPURL: o.amqpURL, Recorder: o.recorder, History: o.recorder, Logger: log, MaxPerNamespace: o.maxPerNamespace, AsyncStore: o.asyncStore,
		Pool: pool.Options{Tick: 50 * time.Millisecond, StopGrace: o.stopGrace, Sandbox: pool.SandboxOptions{Off: o.noSandbox, Network: o.network}}})
	if err != nil {
		t.Fatal(err)
	}
	auth, err := gateway.NewJWTAuth(gateway.JWTConfig{HMACKey: hmacKey})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(gateway.Config{Backend: b, Auth: auth, Sources: arts, Recorder: o.recorder, History: o.recorder, Proxy: o.proxy, Conns: o.conns,
		Async: b.Async(), CallbackHosts: o.callbackHosts, MetricsToken: metricsToken, IdentityMaster: b.IdentityMaster(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	d := &dev{}
	srv := gw.HTTPServer()
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.served.Add(1)
		gw.ServeHTTP(w, r)
	})
	go srv.Serve(gw.Listener(ln))
	token := testkit.Token(t, hmacKey, o.subject)
	c, err := client.New(endpoint, token, nil)
	if err != nil {
		t.Fatal(err)
	}
	d.t, d.dataDir, d.backend, d.srv, d.endpoint, d.client, d.token = t, o.dataDir, b, srv, endpoint, c, token
	d.ns, d.rec, d.reader, d.arts = api.TenantNamespace(o.subject), o.recorder, o.recorder, arts
	t.Cleanup(d.stop)
	return d
}

// startRestartable starts sless dev with o on a data directory of its own, for a tenant of
// its own (subject prefix-<random>); restart starts another on the same directory for the
// same tenant, to see what outlives a d.stop.
func startRestartable(t testing.TB, prefix string, o devOptions) (d *dev, restart func() *dev) {
	t.Helper()
	o.dataDir, o.subject = t.TempDir(), prefix+"-"+randomHex(t)
	return startDev(t, o), func() *dev {
		t.Helper()
		return startDev(t, o)
	}
}

// as is the same sless dev for another tenant (subject prefix-<random>).
func (d *dev) as(prefix string) *dev {
	d.t.Helper()
	subject := prefix + "-" + randomHex(d.t)
	token := testkit.Token(d.t, hmacKey, subject)
	c, err := client.New(d.endpoint, token, nil)
	if err != nil {
		d.t.Fatal(err)
	}
	return &dev{t: d.t, dataDir: d.dataDir, backend: d.backend, endpoint: d.endpoint, client: c, token: token,
		ns: api.TenantNamespace(subject), rec: d.rec, reader: d.reader, arts: d.arts}
}

// stop shuts the stack down like Ctrl-C does; safe to call twice.
func (d *dev) stop() {
	if d.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = d.srv.Shutdown(ctx)
	d.backend.Close()
	d.srv = nil
}

func randomHex(t testing.TB) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// deploy creates a function with fields, uploads files and waits until it is Ready (or
// Failed when wantFailed).
func (d *dev) deploy(name, runtime string, files map[string]string, fields api.FunctionFields) api.Function {
	d.t.Helper()
	fields.Runtime = &runtime
	ctx := context.Background()
	if _, err := d.client.CreateFunction(ctx, d.ns, api.CreateFunction{Name: name, FunctionFields: fields}); err != nil {
		d.t.Fatalf("create %s: %v", name, err)
	}
	if _, err := d.client.UploadSource(ctx, d.ns, name, bytes.NewReader(testkit.Zip(d.t, files))); err != nil {
		d.t.Fatalf("upload %s: %v", name, err)
	}
	return d.waitSettled(name)
}

// waitSettled waits until the function is Ready or Failed for its latest spec.
func (d *dev) waitSettled(name string) api.Function {
	d.t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		fn, err := d.client.GetFunction(context.Background(), d.ns, name)
		if err != nil {
			d.t.Fatal(err)
		}
		if fn.Status.Ready || fn.Status.Phase == api.PhaseFailed {
			return fn
		}
		if time.Now().After(deadline) {
			// Where it stands says why: a build still running, one retried, a start that failed.
			d.t.Fatalf("function %s did not settle within 3m: phase %s, %q; last build error %q; latest revision %q, ready %q",
				name, fn.Status.Phase, fn.Status.Message, fn.Status.LastBuildError, fn.Status.LatestCreatedRevision, fn.Status.LatestReadyRevision)
		}
	}
}

// metricsToken is the token the test gateway serves /metrics to.
const metricsToken = "devplane-test-metrics-token"

// metrics scrapes the gateway's /metrics as Prometheus would, with the metrics token.
func (d *dev) metrics() string {
	d.t.Helper()
	req, err := http.NewRequest(http.MethodGet, d.endpoint+"/metrics", nil)
	if err != nil {
		d.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+metricsToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		d.t.Fatalf("GET /metrics with the metrics token: %d %s", resp.StatusCode, b)
	}
	return string(b)
}

// invoke POSTs body to /fn/<ns>/<name>.
func (d *dev) invoke(name, body string) (int, string) {
	d.t.Helper()
	resp, b := testkit.PostJSON(d.t, d.endpoint+"/fn/"+d.ns+"/"+name, body, nil)
	return resp.StatusCode, string(b)
}

func (d *dev) stats(name string) pool.Stats {
	return d.backend.Stats(d.ns, name)
}

func (d *dev) invocations(name string) []api.Invocation {
	d.t.Helper()
	page, err := d.client.ListInvocations(context.Background(), d.ns, name, 500, "")
	if err != nil {
		d.t.Fatal(err)
	}
	return page.Invocations
}

// exampleFiles reads one of the repository's examples/.
func exampleFiles(t testing.TB, name string) map[string]string {
	t.Helper()
	return dirFiles(t, filepath.Join("..", "examples", name))
}

// dirFiles is every file under root by its slash path, the content of an upload.
func dirFiles(t testing.TB, root string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		files[filepath.ToSlash(rel)] = string(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
