package cluster_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/ptr"

	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/gateway"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/client"
	"sless.dev/sless/gateway/cluster"
	"sless.dev/sless/gateway/codecheck"
	"sless.dev/sless/history"
	"sless.dev/sless/test/pgtest"
	"sless.dev/sless/test/testenv"
	"sless.dev/sless/test/testkit"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// hmacKey signs the test tokens (HS256).
var hmacKey = []byte("gateway-test-key-0123456789abcdef0123456789")

// harness is a gateway over the cluster backend on envtest, with real PostgreSQL history and
// a directory artifact store, served on loopback.
type harness struct {
	t       *testing.T
	URL     string
	server  *gateway.Server
	backend *cluster.Backend
	history *history.Postgres
	dbURL   string
	store   buildkit.Store
}

type harnessOptions struct {
	interceptor string // URL of the server standing where the KEDA interceptor would be
	proxy       gateway.ProxyConfig
	limits      buildkit.Limits
	codeCheck   codecheck.Checker
	historyDSN  string // default: a fresh database
	// functionsDomain serves functions on hosts of their own (gateway.Config.FunctionsDomain).
	functionsDomain string
}

// tracing installs the SDK tracer provider once, as `sless gateway` does, so requests get
// trace ids.
var tracing sync.Once

func newHarness(t *testing.T, o harnessOptions) *harness {
	t.Helper()
	testenv.Need(t)
	tracing.Do(func() {
		ctrllog.SetLogger(logr.Discard())
		if _, err := gateway.SetupTelemetry(context.Background(), "gateway-test"); err != nil {
			t.Fatal(err)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if o.interceptor == "" {
		o.interceptor = "http://127.0.0.1:9" // discard port: nothing answers
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	b, err := cluster.New(ctx, env.Config, cluster.Options{InterceptorURL: o.interceptor, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, backend: b}
	h.dbURL = o.historyDSN
	if h.dbURL == "" {
		h.dbURL = newDatabase(t)
	}
	h.history, err = history.OpenPostgres(h.dbURL, history.PostgresOptions{FlushInterval: 20 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = h.history.Close(ctx)
	})
	store, err := buildkit.NewFSStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h.store = store
	auth, err := gateway.NewJWTAuth(gateway.JWTConfig{HMACKey: hmacKey})
	if err != nil {
		t.Fatal(err)
	}
	h.server, err = gateway.New(gateway.Config{
		Backend: b, Auth: auth, Sources: buildkit.Artifacts{Store: store}, Limits: o.limits, CodeCheck: o.codeCheck,
		Recorder: h.history, History: h.history, Proxy: o.proxy, FunctionsDomain: o.functionsDomain, MetricsToken: metricsToken, Logger: log,
		IdentityMaster: identityMaster,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h.server)
	t.Cleanup(srv.Close)
	h.URL = srv.URL
	return h
}

// metricsToken is the token the test gateway serves /metrics to.
const metricsToken = "cluster-test-metrics-token"

// scrape reads base's /metrics as Prometheus would, with the metrics token.
func scrape(t testing.TB, base string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+metricsToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics with the metrics token: %d %s", resp.StatusCode, b)
	}
	return string(b)
}

// identityMaster is the harness gateway's master key: it signs every /fn/ call with the
// function's key derived from it (signedFor checks what reached the interceptor).
var identityMaster = []byte("cluster-test-master")

// tenant is a fresh identity: its token, namespace and an API client.
type tenant struct {
	sub, token, ns string
	c              *client.Client
}

// newFunction creates a go1.23 function of tn's named name, with every other field defaulted.
func (tn tenant) newFunction(t *testing.T, name string) {
	t.Helper()
	if _, err := tn.c.CreateFunction(context.Background(), tn.ns, api.CreateFunction{Name: name, FunctionFields: api.FunctionFields{Runtime: ptr.To("go1.23")}}); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) tenant() tenant {
	h.t.Helper()
	sub := "user-" + randomHex(6)
	tn := tenant{sub: sub, token: testkit.Token(h.t, hmacKey, sub), ns: api.TenantNamespace(sub)}
	c, err := client.New(h.URL, tn.token, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	tn.c = c
	if err := c.EnsureNamespace(context.Background(), tn.ns); err != nil {
		h.t.Fatal(err)
	}
	return tn
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newDatabase gives the test its own database on the real PostgreSQL.
func newDatabase(t testing.TB) string { return pgtest.NewDatabase(t, "sless_gateway_test") }

// do sends a raw request (for cases the typed client cannot express) and returns the status
// and the decoded error body, if any.
func do(t testing.TB, method, u, tok, contentType string, body io.Reader) (int, api.Error, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e api.Error
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 400 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(data, &e); err != nil {
			t.Fatalf("%s %s: %d with a non-JSON error body %q", method, u, resp.StatusCode, data)
		}
	}
	if resp.StatusCode >= 400 && e.Error == "" {
		e.Error = string(data) // a function's own error body, passed through
	}
	return resp.StatusCode, e, resp.Header
}
