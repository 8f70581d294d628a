package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "sless.dev/sless/apis/v1alpha1"

	"sless.dev/sless/gateway"
	"sless.dev/sless/gateway/api"
	gwclient "sless.dev/sless/gateway/client"
	"sless.dev/sless/rules"
	"sless.dev/sless/test/otlptest"
	"sless.dev/sless/test/pgtest"
	"sless.dev/sless/test/testenv"
	"sless.dev/sless/test/testkit"
)

// TestGatewayAuthenticatorFlags checks that the gateway never starts without token
// verification unless asked to, and reads the HMAC key the way Secrets mount it.
func TestGatewayAuthenticatorFlags(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("k", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cases := []struct {
		name    string
		env     string
		flags   gatewayFlags
		wantErr string
		noAuth  bool
	}{
		{name: "nothing configured", wantErr: "no token verification configured"},
		{name: "insecure", flags: gatewayFlags{insecureNoAuth: true}, noAuth: true},
		{name: "insecure contradicts a key", env: strings.Repeat("k", 40), flags: gatewayFlags{insecureNoAuth: true}, wantErr: "contradicts"},
		{name: "key from env", env: strings.Repeat("k", 40)},
		{name: "key file with trailing newline", flags: gatewayFlags{hmacKeyFile: keyFile}},
		{name: "missing key file", flags: gatewayFlags{hmacKeyFile: keyFile + ".missing"}, wantErr: "--jwt-hmac-key-file"},
		{name: "short key", env: "short", wantErr: "shorter than 32 bytes"},
		{name: "JWKS", flags: gatewayFlags{jwksURL: "https://issuer.example/.well-known/jwks.json"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SLESS_JWT_HMAC_KEY", tc.env)
			auth, err := tc.flags.authenticator(log)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, isNoAuth := auth.(gateway.NoAuth); isNoAuth != tc.noAuth {
				t.Fatalf("authenticator %T", auth)
			}
			if tc.flags.hmacKeyFile != "" { // the newline is not part of the key
				tok, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{Subject: "s",
					ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Minute))}).SignedString([]byte(strings.Repeat("k", 40)))
				if _, err := auth.Authenticate(context.Background(), tok); err != nil {
					t.Fatalf("token signed with the file's key: %v", err)
				}
			}
		})
	}
}

// writePair writes a new certificate and its key to dir's tls.crt and tls.key and returns
// their paths and the certificate.
func writePair(t *testing.T, dir string) (cert, key string, der []byte) {
	t.Helper()
	srv, _ := testkit.TLSPair(t)
	keyDER, err := x509.MarshalPKCS8PrivateKey(srv.Certificates[0].PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	der = srv.Certificates[0].Certificate[0]
	cert, key = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for f, b := range map[string]*pem.Block{key: {Type: "PRIVATE KEY", Bytes: keyDER}, cert: {Type: "CERTIFICATE", Bytes: der}} {
		if err := os.WriteFile(f, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return cert, key, der
}

// TestGatewayTLSFlags: --tls-cert-file and --tls-key-file go together; a pair that does not
// load names the flags.
func TestGatewayTLSFlags(t *testing.T) {
	cert, key, _ := writePair(t, t.TempDir())
	for _, tc := range []struct {
		name, cert, key, wantErr string
		tls                      bool
	}{
		{name: "neither: plain HTTP and h2c"},
		{name: "both", cert: cert, key: key, tls: true},
		{name: "a certificate without its key", cert: cert, wantErr: "go together"},
		{name: "a key without its certificate", key: key, wantErr: "go together"},
		{name: "the key as the certificate", cert: key, key: key, wantErr: "--tls-cert-file/--tls-key-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := gatewayFlags{tlsCertFile: tc.cert, tlsKeyFile: tc.key}.tls(t.Context())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || (cfg != nil) != tc.tls || tc.tls && cfg.GetCertificate == nil {
				t.Fatalf("config %+v, error %v; want TLS %v", cfg, err, tc.tls)
			}
		})
	}
}

// TestGatewayCertificateRenewed: a pair renewed in place (a mounted Secret that cert-manager
// renews) is served to the next handshake without a restart.
func TestGatewayCertificateRenewed(t *testing.T) {
	dir := t.TempDir()
	cert, key, first := writePair(t, dir)
	cfg, err := gatewayFlags{tlsCertFile: cert, tlsKeyFile: key}.tls(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	testkit.AcceptEach(t, ln, func(c net.Conn) { _ = c.(*tls.Conn).Handshake() })
	served := func() []byte {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true}) // only the served certificate is looked at
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Raw
	}
	if !bytes.Equal(served(), first) {
		t.Fatal("the gateway does not serve the pair it was given")
	}
	_, _, renewed := writePair(t, dir)
	testkit.WaitFor(t, "the renewed certificate served", 20*time.Second, func() bool { return bytes.Equal(served(), renewed) })
}

// TestMetricsTokenFile: the metrics token of --metrics-token-file is read as a Secret mounts
// it (a trailing newline dropped); a missing file or one too short to be a secret is refused
// with the flag named.
func TestMetricsTokenFile(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"good": "0123456789abcdef0123\n", "short": "secret\n", "empty": ""} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := readMetricsToken(filepath.Join(dir, "good")); err != nil || got != "0123456789abcdef0123" {
		t.Errorf("good: %q, %v", got, err)
	}
	for _, name := range []string{"short", "empty", "missing"} {
		if _, err := readMetricsToken(filepath.Join(dir, name)); err == nil || !strings.Contains(err.Error(), "--metrics-token-file") {
			t.Errorf("%s: %v, want an error naming --metrics-token-file", name, err)
		}
	}
}

// TestGatewayCommand runs `sless gateway` as users do (flags, env, kubeconfig) against a real
// API server and PostgreSQL: /metrics answers only the metrics token, the API answers with a
// verified token, /fn/ reaches the function
// through the interceptor address, the invocation lands in the history with the trace id of
// the span exported to an OTLP collector (OTEL_* variables), and cancelling the
// command drains and returns.
func TestGatewayCommand(t *testing.T) {
	env := testenv.ForTest(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := testenv.WriteKubeconfig(env.Config, kubeconfig); err != nil {
		t.Fatal(err)
	}
	key := strings.Repeat("s", 40)
	spans := otlptest.Start(t)
	t.Setenv("KUBECONFIG", kubeconfig)
	t.Setenv("SLESS_JWT_HMAC_KEY", key)
	dbURL := pgtest.NewDatabase(t, "sless_gateway_cmd_test")
	var signed atomic.Value // the signature and the call it is over, of the last call
	interceptor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		signed.Store(r.Clone(context.Background()))
		fmt.Fprintf(w, "host=%s path=%s", r.Host, r.URL.Path)
	}))
	defer interceptor.Close()
	// The gateway signs /fn/ calls with a master it keeps in the build namespace (made at
	// its first start when the operator has not made it yet).
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sless-system"}}); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	metricsToken := filepath.Join(t.TempDir(), "metrics-token")
	if err := os.WriteFile(metricsToken, []byte("gateway-command-metrics-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := newGatewayCmd()
	cmd.SetArgs([]string{"--listen=" + addr, "--interceptor-url=" + interceptor.URL, "--database-url=" + dbURL,
		"--artifacts-dir=" + t.TempDir(), "--log-level=warn", "--metrics-token-file=" + metricsToken})
	cmd.SetErr(io.Discard)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	base := "http://" + addr
	waitOK(t, base+"/healthz", done)
	for authz, want := range map[string]int{"": http.StatusUnauthorized, "Bearer gateway-command-metrics-token": http.StatusOK} {
		req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET /metrics with %q: %d, want %d", authz, resp.StatusCode, want)
		}
	}

	tok, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{Subject: "cmd-test",
		ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}).SignedString([]byte(key))
	c, err := gwclient.New(base, tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	ns := api.TenantNamespace("cmd-test")
	rt := "nodejs22"
	if _, err := c.CreateFunction(ctx, ns, api.CreateFunction{Name: "hi", FunctionFields: api.FunctionFields{Runtime: &rt}}); err != nil {
		t.Fatal(err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var fn v1.Function
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "hi"}, &fn); err != nil {
			return err
		}
		fn.Status.Phase, fn.Status.RoutingHost, fn.Status.ObservedGeneration = v1.FunctionReady, "hi."+ns+".fn.test", fn.Generation
		return env.Client.Status().Update(ctx, &fn)
	})
	if err != nil {
		t.Fatal(err)
	}
	fnURL := base + "/fn/" + ns + "/hi/world"
	waitOK(t, fnURL, done)
	_, body := testkit.Get(t, fnURL, "", nil)
	if want := "host=hi." + ns + ".fn.test path=/world"; string(body) != want {
		t.Fatalf("function saw %q, want %q", body, want)
	}
	var masterSecret corev1.Secret
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "sless-system", Name: "sless-identity"}, &masterSecret); err != nil {
		t.Fatal(err)
	}
	master, _ := hex.DecodeString(string(masterSecret.Data["master"]))
	call := signed.Load().(*http.Request)
	sig := call.Header.Get(rules.HeaderSignature)
	ts, _ := strconv.ParseInt(strings.TrimPrefix(strings.Split(sig, ",")[0], "t="), 10, 64)
	if want := rules.Signature(rules.FunctionKey(master, ns, "hi"), ts, call.Method, rules.SignaturePath(call.URL), call.Header); sig != want || len(master) != 32 {
		t.Fatalf("the call reached the interceptor signed %q, want %q (the key of %s/hi under the master in sless-identity)", sig, want, ns)
	}
	deadline := time.Now().Add(10 * time.Second)
	var traceID string
	for {
		page, err := c.ListInvocations(ctx, ns, "hi", 0, "")
		if err == nil && len(page.Invocations) >= 2 {
			traceID = page.Invocations[0].TraceID
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("invocations not recorded: %+v, %v", page, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopCommand(t, "gateway", cancel, done)
	if !spans.HasSpan("GET /fn", traceID) {
		t.Fatalf("no exported GET /fn span with the recorded trace id %s (got %v)", traceID, spans.SpanNames())
	}
	// The history writer's OpenTelemetry counter is exported beside the spans (flushed at stop).
	if n, ok := spans.Sum("sless.history.records.written", "", ""); !ok || n < 2 {
		t.Fatalf("sless.history.records.written exported: %d %v, want at least the 2 recorded invocations", n, ok)
	}
	var n int
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM invocations WHERE namespace = $1", ns).Scan(&n); err != nil || n < 2 {
		t.Fatalf("history rows after shutdown: %d, %v", n, err)
	}
}

// stopCommand cancels the context of the command name runs and fails t unless the command
// then returns nil, on done, within 30 s.
func stopCommand(t *testing.T, name string, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s exited with %v after cancel", name, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not stop within 30 s of cancel", name)
	}
}

// waitOK polls u until it answers 200, failing early if the command exited.
func waitOK(t *testing.T, u string, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-done:
			t.Fatalf("gateway exited: %v", err)
		default:
		}
		if resp, err := http.Get(u); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer 200", u)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
