package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"sless.dev/sless/gateway"
	"sless.dev/sless/gateway/cluster"
	"sless.dev/sless/gateway/codecheck"
	"sless.dev/sless/history"
	"sless.dev/sless/rules"
	"sless.dev/sless/scaling"
	"sless.dev/sless/triggers/rabbitmq/amqpsource"
)

func init() { subcommands = append(subcommands, newGatewayCmd) }

// gatewayFlags are the settings of `sless gateway`; secrets come from the environment only.
type gatewayFlags struct {
	listen, level, interceptorURL, databaseURL string
	jwksURL, issuer, audience, hmacKeyFile     string
	insecureNoAuth                             bool
	codeCheckURL, codeCheckModel               string
	functionsDomain, buildNamespace            string
	identitySecret                             string
	tlsCertFile, tlsKeyFile                    string
	amqpURL, metricsTokenFile                  string
	callbackHosts                              []string
	proxy                                      gateway.ProxyConfig
	conns                                      gateway.ConnLimits
	store                                      storeFlags
}

func newGatewayCmd() *cobra.Command {
	var f gatewayFlags
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Serve the /v1 REST API, the /fn/ invocation proxy and the console",
		Long: `Serves /v1 (REST API, JWT-authenticated), /fn/<namespace>/<function> (forwarded to the KEDA HTTP
interceptor with the function's routing host), /console, /healthz, and /metrics to the
holder of the --metrics-token-file token.
Tokens are verified with an HS256 key (env SLESS_JWT_HMAC_KEY or --jwt-hmac-key-file) and/or the
RS256/ES256 keys of --jwks-url. Traces are exported over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runGateway(cmd, f) },
	}
	fs := cmd.Flags()
	fs.StringVar(&f.listen, "listen", envOr("SLESS_LISTEN", ":8080"), "address to serve on (env SLESS_LISTEN)")
	fs.StringVar(&f.level, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.interceptorURL, "interceptor-url", envOr("SLESS_INTERCEPTOR_URL", scaling.DefaultOptions().InterceptorURL), "KEDA HTTP interceptor proxy /fn/ requests go to (env SLESS_INTERCEPTOR_URL)")
	fs.StringVar(&f.databaseURL, "database-url", os.Getenv("SLESS_DATABASE_URL"), "PostgreSQL URL of the invocation history (env SLESS_DATABASE_URL); empty: no history")
	fs.StringVar(&f.jwksURL, "jwks-url", os.Getenv("SLESS_JWKS_URL"), "JWKS URL of the token issuer, for RS256/ES256 tokens (env SLESS_JWKS_URL)")
	fs.StringVar(&f.hmacKeyFile, "jwt-hmac-key-file", os.Getenv("SLESS_JWT_HMAC_KEY_FILE"), "file holding the HS256 key (or set SLESS_JWT_HMAC_KEY)")
	fs.StringVar(&f.issuer, "jwt-issuer", os.Getenv("SLESS_JWT_ISSUER"), "required iss claim, if set")
	fs.StringVar(&f.audience, "jwt-audience", os.Getenv("SLESS_JWT_AUDIENCE"), "required aud claim, if set")
	fs.BoolVar(&f.insecureNoAuth, "insecure-no-auth", false, "accept every request without a token (local experiments only)")
	fs.StringVar(&f.codeCheckURL, "code-check-url", os.Getenv("SLESS_CODE_CHECK_URL"), "OpenAI-compatible API base (…/v1) that reviews uploads; empty: no check. API key in SLESS_CODE_CHECK_API_KEY")
	fs.StringVar(&f.codeCheckModel, "code-check-model", envOr("SLESS_CODE_CHECK_MODEL", "gpt-4o-mini"), "model of the code check")
	fs.DurationVar(&f.proxy.TimeoutMargin, "timeout-margin", rules.InvocationMargin, "added to a function's timeout before /fn/ answers 504")
	fs.DurationVar(&f.proxy.ColdStartTimeout, "cold-start-timeout", 2*time.Minute, "how long a /fn/ request may wait for an instance of a function at zero, beyond the function's timeout")
	fs.Int64Var(&f.proxy.MaxHeldPerFunction, "max-held-per-function", 1000, "requests in flight per function before /fn/ answers 503")
	fs.Int64Var(&f.proxy.MaxHeld, "max-held", 10000, "requests in flight in total before /fn/ answers 503")
	fs.StringVar(&f.tlsCertFile, "tls-cert-file", os.Getenv("SLESS_TLS_CERT_FILE"), "PEM certificate chain: serve HTTPS (HTTP/2 by ALPN beside HTTP/1.1) instead of plain HTTP and h2c, read again when it changes; with --tls-key-file (env SLESS_TLS_CERT_FILE)")
	fs.StringVar(&f.tlsKeyFile, "tls-key-file", os.Getenv("SLESS_TLS_KEY_FILE"), "PEM private key of --tls-cert-file (env SLESS_TLS_KEY_FILE)")
	fs.StringVar(&f.functionsDomain, "functions-domain", os.Getenv("SLESS_FUNCTIONS_DOMAIN"), "serve each function on its own origin <name>.<namespace>.<domain> (a wildcard DNS name pointing at the gateway; env SLESS_FUNCTIONS_DOMAIN); /fn/ paths keep working, sandboxed")
	fs.StringVar(&f.amqpURL, "amqp-url", os.Getenv("SLESS_AMQP_URL"), "RabbitMQ URL asynchronous invocations are queued on (env SLESS_AMQP_URL); with --database-url it turns on Prefer: respond-async")
	bindCallbackFlag(fs, &f.callbackHosts)
	fs.StringVar(&f.buildNamespace, "build-namespace", envOr("SLESS_BUILD_NAMESPACE", "sless-system"), "namespace the operator runs builds in, read for build logs (env SLESS_BUILD_NAMESPACE)")
	fs.StringVar(&f.identitySecret, "identity-secret", envOr("SLESS_IDENTITY_SECRET", scaling.DefaultOptions().IdentitySecret), "Secret in the build namespace with the master key /fn/ calls are signed with, each with its function's key (made at the first start; the operator reads the same; env SLESS_IDENTITY_SECRET)")
	bindConnFlags(fs, &f.conns)
	fs.StringVar(&f.metricsTokenFile, "metrics-token-file", os.Getenv("SLESS_METRICS_TOKEN_FILE"), metricsTokenUsage+"; empty: /metrics is off (env SLESS_METRICS_TOKEN_FILE)")
	f.store.bind(fs, "/var/lib/sless/artifacts")
	return cmd
}

const metricsTokenUsage = "file holding the token /metrics is served to (Authorization: Bearer <token>; at least 16 characters): its series name every tenant's functions"

// readMetricsToken reads the metrics token of path.
func readMetricsToken(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--metrics-token-file: %w", err)
	}
	token := strings.TrimSpace(string(data))
	if len(token) < 16 {
		return "", fmt.Errorf("--metrics-token-file %s holds %d characters; a metrics token needs at least 16 (e.g. openssl rand -hex 32)", path, len(token))
	}
	return token, nil
}

// bindConnFlags adds the connection limits shared by `sless gateway` and `sless dev`.
func bindConnFlags(fs *pflag.FlagSet, l *gateway.ConnLimits) {
	fs.Int64Var(&l.MaxConns, "max-connections", 10000, "open client connections before requests get 503 and the connection is closed")
	fs.Int64Var(&l.MaxConnsPerClient, "max-connections-per-client", 0, "open connections of one client address before its requests get 429 and the connection is closed (0: a quarter of --max-connections; behind a proxy that pools connections, raise it to --max-connections)")
	fs.DurationVar(&l.IdleTimeout, "idle-timeout", 60*time.Second, "closes keep-alive connections idle this long")
	fs.Int64Var(&l.MaxRequestsPerClient, "max-requests-per-client", 0, "requests one client address has in flight across all its connections and HTTP/2 streams before the next gets 429 (0: a quarter of the held-request cap per function, 250, at most --max-connections-per-client; behind a proxy that pools connections, raise it with --max-connections-per-client)")
	fs.DurationVar(&l.BodyTimeout, "body-timeout", 2*time.Minute, "time to send a request body (uploads and asynchronous calls included); a body a function takes may take the function's timeout")
	fs.DurationVar(&l.BodyIdleTimeout, "body-idle-timeout", 30*time.Second, "a request body that sends no byte for this long while the gateway waits for one gets 408 (a function's call is cancelled), whatever is left of its whole bound")
}

// bindCallbackFlag declares the hosts asynchronous invocations may call back.
func bindCallbackFlag(fs *pflag.FlagSet, hosts *[]string) {
	fs.StringSliceVar(hosts, "async-callback-hosts", nil, "hosts (example.com, *.example.com, 10.0.0.7) asynchronous invocations may POST their outcome to (X-Sless-Callback-URL); none: callbacks are refused. In a cluster a name resolving to a private, loopback or link-local address is refused: list the address")
}

func runGateway(cmd *cobra.Command, f gatewayFlags) error {
	ctx := cmd.Context()
	logger, err := newLogger(cmd, f.level)
	if err != nil {
		return err
	}
	log.SetLogger(logr.FromSlogHandler(logger.Handler()))
	auth, err := f.authenticator(logger)
	if err != nil {
		return err
	}
	var metricsToken string
	if f.metricsTokenFile != "" {
		if metricsToken, err = readMetricsToken(f.metricsTokenFile); err != nil {
			return err
		}
	} else {
		logger.Info("/metrics is off: no --metrics-token-file")
	}
	stopTelemetry, err := gateway.SetupTelemetry(ctx, "sless-gateway")
	if err != nil {
		return err
	}
	defer shutdownWithin(10*time.Second, stopTelemetry, logger, "telemetry export")
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubernetes configuration: %w", err)
	}
	backend, err := cluster.New(ctx, cfg, cluster.Options{InterceptorURL: f.interceptorURL, BuildNamespace: f.buildNamespace, Logger: logger})
	if err != nil {
		return err
	}
	kc, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	master, err := cluster.IdentityMaster(ctx, kc, f.buildNamespace, f.identitySecret)
	if err != nil {
		return err
	}
	artifacts, err := f.store.open(ctx)
	if err != nil {
		return err
	}
	gcfg := gateway.Config{Backend: backend, Auth: auth, Sources: artifacts, Proxy: f.proxy, Conns: f.conns,
		FunctionsDomain: f.functionsDomain, MetricsToken: metricsToken, IdentityMaster: master, Logger: logger}
	if f.codeCheckURL != "" {
		gcfg.CodeCheck = &codecheck.LLM{URL: f.codeCheckURL, Model: f.codeCheckModel, APIKey: os.Getenv("SLESS_CODE_CHECK_API_KEY")}
	}
	if f.databaseURL != "" {
		store, err := openHistory(ctx, f.databaseURL, logger)
		if err != nil {
			return err
		}
		defer shutdownWithin(10*time.Second, store.Close, logger, "invocation history flush")
		gcfg.Recorder, gcfg.History = store, store
		if f.amqpURL != "" {
			pub := &amqpsource.Publisher{URL: f.amqpURL, AsyncStore: store, Logger: logger}
			defer pub.Close()
			gcfg.Async, gcfg.CallbackHosts = pub, f.callbackHosts
		}
	}
	srv, err := gateway.New(gcfg)
	if err != nil {
		return err
	}
	tlsConfig, err := f.tls(ctx)
	if err != nil {
		return err
	}
	return serveGateway(ctx, f.listen, srv, tlsConfig, logger)
}

// tls is the server's TLS configuration from --tls-cert-file and --tls-key-file: nil (plain
// HTTP and h2c) without them. The pair is read again when the files change (a mounted Secret
// renewed by cert-manager, say) until ctx ends; a pair that does not load keeps the last
// good one.
func (f gatewayFlags) tls(ctx context.Context) (*tls.Config, error) {
	if (f.tlsCertFile == "") != (f.tlsKeyFile == "") {
		return nil, errors.New("--tls-cert-file and --tls-key-file go together: give both, or neither for plain HTTP")
	}
	if f.tlsCertFile == "" {
		return nil, nil
	}
	certs, err := certwatcher.New(f.tlsCertFile, f.tlsKeyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file/--tls-key-file: %w", err)
	}
	go func() {
		if err := certs.Start(ctx); err != nil {
			log.Log.Error(err, "Warning: the TLS certificate files are not watched; a renewed pair takes a restart")
		}
	}()
	return &tls.Config{GetCertificate: certs.GetCertificate, MinVersion: tls.VersionTLS12}, nil
}

// authenticator builds the token verifier from the flags; no verifier is an error unless
// --insecure-no-auth is given.
func (f gatewayFlags) authenticator(logger *slog.Logger) (gateway.Authenticator, error) {
	key := []byte(os.Getenv("SLESS_JWT_HMAC_KEY"))
	if f.hmacKeyFile != "" {
		data, err := os.ReadFile(f.hmacKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--jwt-hmac-key-file: %w", err)
		}
		key = trimNewline(data)
	}
	if f.insecureNoAuth {
		if len(key) > 0 || f.jwksURL != "" {
			return nil, errors.New("--insecure-no-auth contradicts the configured JWT key or JWKS URL; drop one")
		}
		logger.Warn("Warning: authentication is off (--insecure-no-auth); every caller may use every namespace")
		return gateway.NoAuth{}, nil
	}
	if len(key) == 0 && f.jwksURL == "" {
		return nil, errors.New("no token verification configured: set SLESS_JWT_HMAC_KEY, --jwt-hmac-key-file or --jwks-url (or --insecure-no-auth for local experiments)")
	}
	return gateway.NewJWTAuth(gateway.JWTConfig{HMACKey: key, JWKSURL: f.jwksURL, Issuer: f.issuer, Audience: f.audience})
}

func trimNewline(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// openHistory starts the PostgreSQL history and applies its migrations; a database that is
// down only costs history, never invocations, so that is a warning.
func openHistory(ctx context.Context, url string, logger *slog.Logger) (*history.Postgres, error) {
	store, err := history.OpenPostgres(url, history.PostgresOptions{Logger: logger})
	if err != nil {
		return nil, err
	}
	mctx, cancel := context.WithTimeout(ctx, history.MigrateTimeout)
	defer cancel()
	if err := store.Migrate(mctx); err != nil {
		logger.Warn("Warning: invocation history database unavailable at start; will retry in the background", "error", err)
	}
	return store, nil
}

// serveGateway serves until ctx ends, then drains in-flight requests; over TLS when
// tlsConfig is set.
func serveGateway(ctx context.Context, addr string, gw *gateway.Server, tlsConfig *tls.Config, logger *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := gw.HTTPServer()
	srv.TLSConfig = tlsConfig
	errc := make(chan error, 1)
	go func() {
		if tlsConfig != nil {
			errc <- srv.ServeTLS(gw.Listener(ln), "", "")
			return
		}
		errc <- srv.Serve(gw.Listener(ln))
	}()
	logger.Info("gateway listening", "addr", ln.Addr().String(), "tls", tlsConfig != nil, "version", version)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	logger.Info("gateway draining")
	shutdownWithin(30*time.Second, srv.Shutdown, logger, "draining requests")
	return nil
}

func shutdownWithin(d time.Duration, stop func(context.Context) error, logger *slog.Logger, what string) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := stop(ctx); err != nil {
		logger.Warn("Warning: shutdown incomplete", "step", what, "error", err)
	}
}
