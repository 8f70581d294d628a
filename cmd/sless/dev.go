package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/spf13/cobra"

	"sless.dev/sless/cmd/sless/cli"
	"sless.dev/sless/devplane"
	"sless.dev/sless/devplane/pool"
	"sless.dev/sless/gateway"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/history"
)

func init() { subcommands = append(subcommands, newDevCmd) }

type devFlags struct {
	dataDir, listen, amqpURL, databaseURL, examples, subject string
	tokenTTL                                                 time.Duration
	historySize, maxBuilds                                   int
	buildTimeout                                             time.Duration
	functionsDomain, metricsTokenFile                        string
	conns                                                    gateway.ConnLimits
	store                                                    storeFlags
	login                                                    bool
	callbackHosts                                            []string
	network                                                  string
	egressAllow                                              []string
}

func newDevCmd() *cobra.Command {
	var f devFlags
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the whole platform on this machine: REST API, /fn/ gateway, console, local builds and processes",
		Long: `sless dev serves the same /v1 API, /fn/ gateway and /console as the cluster gateway,
with functions built locally and run as processes on loopback (scale to zero, cold-start
holding), cron and AMQP triggers, and state kept in the data directory across restarts.
A signing key is generated into the data directory and a ready token is printed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDev(cmd.Context(), f, cmd.OutOrStdout()) },
	}
	fs := cmd.Flags()
	fs.StringVar(&f.dataDir, "data-dir", envOr("SLESS_DATA_DIR", ".sless"), "directory for state, builds, artifacts and the dev signing key (env SLESS_DATA_DIR)")
	fs.StringVar(&f.listen, "listen", envOr("SLESS_LISTEN", "127.0.0.1:8080"), "address to serve on; keep it on loopback (env SLESS_LISTEN)")
	fs.StringVar(&f.amqpURL, "amqp-url", os.Getenv("SLESS_AMQP_URL"), "RabbitMQ URL for event triggers, amqp://user:pass@host:5672/ (env SLESS_AMQP_URL); none: event triggers stay inactive")
	fs.StringVar(&f.databaseURL, "database-url", os.Getenv("SLESS_DATABASE_URL"), "PostgreSQL URL for the invocation history (env SLESS_DATABASE_URL); none: the newest --history-size records in memory")
	fs.IntVar(&f.historySize, "history-size", history.DefaultMemoryCapacity, "invocations kept in memory without --database-url")
	fs.IntVar(&f.maxBuilds, "max-concurrent-builds", 2, "builds that run at once; the others wait their turn")
	fs.DurationVar(&f.buildTimeout, "build-timeout", 10*time.Minute, "longest a build may run (a sandboxed build's steps are killed then)")
	fs.StringVar(&f.examples, "deploy-examples", "", "deploy the example functions of this directory (hello-go, hello-python, hello-node) with http triggers and a cron trigger, then print their URLs")
	fs.StringVar(&f.subject, "subject", "dev", "subject of the printed token; its tenant namespace is derived from it")
	fs.DurationVar(&f.tokenTTL, "token-ttl", 30*24*time.Hour, "lifetime of the printed token")
	fs.StringVar(&f.functionsDomain, "functions-domain", "fn.localhost", "serve each function on its own origin http://<name>.<namespace>.<domain>:<port>/ (browsers and curl resolve *.localhost to loopback); empty: /fn/ only")
	bindConnFlags(fs, &f.conns)
	fs.Lookup("max-connections").DefValue = "1000"
	f.conns.MaxConns = 1000
	bindCallbackFlag(fs, &f.callbackHosts)
	fs.StringVar(&f.metricsTokenFile, "metrics-token-file", "", metricsTokenUsage+" (default <data-dir>/metrics-token, generated on first use)")
	fs.BoolVar(&f.login, "login", false, "save this server's endpoint and token for the sless CLI, as sless login does")
	fs.StringVar(&f.network, "function-network", pool.NetworkIsolated, "what sandboxed functions and builds reach: isolated (a network namespace each, outbound to public addresses only through slirp4netns), none (loopback only) or host (this machine's network, its loopback services and this gateway included: a trusted single-user machine only)")
	fs.StringSliceVar(&f.egressAllow, "function-egress-allow", nil, "private IPv4 ranges (CIDR, or an address) isolated functions may reach besides public addresses, e.g. a database on the local network; this machine's loopback is never reachable")
	f.store.bind(fs, "")
	fs.Lookup("artifacts-dir").Usage = "directory for uploads when no S3 endpoint is given (default <data-dir>/artifacts)"
	return cmd
}

func runDev(ctx context.Context, f devFlags, out io.Writer) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	stopTelemetry, err := gateway.SetupTelemetry(ctx, "sless-dev")
	if err != nil {
		return err
	}
	defer func() {
		flushCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = stopTelemetry(flushCtx)
	}()
	dataDir, err := filepath.Abs(f.dataDir)
	if err != nil {
		return fmt.Errorf("--data-dir %q: %w", f.dataDir, err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("creating the data directory: %w", err)
	}
	key, err := devSigningKey(filepath.Join(dataDir, "dev-signing.key"))
	if err != nil {
		return err
	}
	auth, err := gateway.NewJWTAuth(gateway.JWTConfig{HMACKey: key})
	if err != nil {
		return err
	}
	token, err := devToken(key, f.subject, f.tokenTTL)
	if err != nil {
		return err
	}
	if f.metricsTokenFile == "" {
		f.metricsTokenFile = filepath.Join(dataDir, "metrics-token")
		if err := ensureSecretFile(f.metricsTokenFile); err != nil {
			return err
		}
	}
	metricsToken, err := readMetricsToken(f.metricsTokenFile)
	if err != nil {
		return err
	}
	if f.store.dir == "" {
		f.store.dir = filepath.Join(dataDir, "artifacts")
	}
	artifacts, err := f.store.open(ctx)
	if err != nil {
		return err
	}
	rec, reader, closeHistory, err := openDevHistory(ctx, f, log)
	if err != nil {
		return err
	}
	defer closeHistory()
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", f.listen, err)
	}
	endpoint := "http://" + ln.Addr().String()
	network, err := networkOptions(f)
	if err != nil {
		ln.Close()
		return err
	}
	opts := devplane.Options{DataDir: dataDir, Artifacts: artifacts, GatewayURL: endpoint, AMQPURL: f.amqpURL, Recorder: rec, History: reader, Logger: log, MaxBuilds: f.maxBuilds, BuildTimeout: f.buildTimeout,
		Pool: pool.Options{Sandbox: pool.SandboxOptions{Network: network}}}
	if pg, ok := reader.(*history.Postgres); ok {
		opts.AsyncStore = pg
	}
	backend, err := devplane.New(opts)
	if err != nil {
		ln.Close()
		return err
	}
	defer backend.Close()
	srv, err := gateway.New(gateway.Config{Backend: backend, Auth: auth, Sources: artifacts, Recorder: rec, History: reader,
		Conns: f.conns, FunctionsDomain: f.functionsDomain, Async: backend.Async(), CallbackHosts: f.callbackHosts,
		MetricsToken: metricsToken, IdentityMaster: backend.IdentityMaster(), Logger: log})
	if err != nil {
		ln.Close()
		return err
	}
	hs := srv.HTTPServer()
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(srv.Listener(ln)) }()
	if err := cli.WriteSecret(filepath.Join(dataDir, "token"), []byte(token+"\n")); err != nil {
		return err
	}
	cliLine, err := devCLI(f, endpoint, token)
	if err != nil {
		return err
	}
	printBanner(out, endpoint, token, api.TenantNamespace(f.subject), cliLine, isolationText(backend.Pool().Isolation(), currentUser()), f)
	if f.examples != "" {
		if err := deployExamples(ctx, out, endpoint, token, api.TenantNamespace(f.subject), f.examples); err != nil {
			log.Error("deploying the examples failed", "error", err)
		}
	}
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		return fmt.Errorf("serving %s: %w", endpoint, err)
	}
	fmt.Fprintln(out, "stopping sless dev…")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutdownCtx); err != nil {
		log.Warn("Warning: requests still in flight were cut off", "error", err)
	}
	return nil
}

// devCLI is the CLI line of the `sless dev` banner: with --login it saves this server's
// endpoint and token for the CLI, otherwise it says how to.
func devCLI(f devFlags, endpoint, token string) (string, error) {
	if !f.login {
		return fmt.Sprintf("sless login --endpoint %s --token-file %s   (or start with --login)", endpoint, filepath.Join(f.dataDir, "token")), nil
	}
	path, err := cli.SaveConfig(cli.Config{Endpoint: endpoint, Token: token})
	if err != nil {
		return "", fmt.Errorf("--login: %w", err)
	}
	return "logged in (" + path + "): sless deploy, invoke, logs … use this server", nil
}

// networkOptions reads --function-network and --function-egress-allow.
func networkOptions(f devFlags) (pool.NetworkOptions, error) {
	o := pool.NetworkOptions{Mode: f.network}
	switch f.network {
	case pool.NetworkIsolated, pool.NetworkNone, pool.NetworkHost:
	default:
		return o, fmt.Errorf("--function-network %q: want %s, %s or %s", f.network, pool.NetworkIsolated, pool.NetworkNone, pool.NetworkHost)
	}
	for _, s := range f.egressAllow {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil || !a.Is4() {
				return o, fmt.Errorf("--function-egress-allow %q: want an IPv4 range (10.1.2.0/24) or address", s)
			}
			p = netip.PrefixFrom(a, 32)
		}
		if !p.Addr().Is4() || p.Addr().IsLoopback() {
			return o, fmt.Errorf("--function-egress-allow %q: want an IPv4 range outside the loopback (127.0.0.0/8 is never reachable)", s)
		}
		o.Allow = append(o.Allow, p.Masked())
	}
	if len(o.Allow) > 0 && f.network != pool.NetworkIsolated {
		return o, fmt.Errorf("--function-egress-allow applies to --function-network %s only", pool.NetworkIsolated)
	}
	return o, nil
}

// isolationText is the banner's paragraph on how functions are kept apart.
func isolationText(iso pool.Isolation, user string) string {
	if iso.Sandboxed {
		return fmt.Sprintf(`Every function runs sandboxed: as a user of its own (uid %d and up), seeing its
build and a private /tmp only, with its memory_mb and %s tasks at most (held by %s), on
%s.`, pool.FirstSandboxUID, "1,024", iso.Limits, iso.Network)
	}
	return fmt.Sprintf(`Functions are not sandboxed here (%s): every function runs as your OS user (%s),
like sless dev itself: deploy only code you trust. Tenants are kept apart at the API, not by
the operating system.`, iso.Why, user)
}

func printBanner(out io.Writer, endpoint, token, ns, cli, isolation string, f devFlags) {
	broker := "off (start with --amqp-url to run event triggers)"
	if f.amqpURL != "" {
		broker = "on"
	}
	hist := "in memory"
	if f.databaseURL != "" {
		hist = "PostgreSQL"
	}
	own := "off (--functions-domain)"
	if f.functionsDomain != "" {
		own = "http://<name>." + ns + "." + f.functionsDomain + ":" + endpoint[strings.LastIndex(endpoint, ":")+1:] + "/  (an origin of its own each)"
	}
	fmt.Fprintf(out, `sless dev is running
  API        %[1]s/v1   (OpenAPI: %[1]s/v1/openapi.yaml)
  console    %[1]s/console/#token=%[6]s
             (signs you in at once; a URL fragment never leaves the browser)
  functions  %[1]s/fn/%[2]s/<name>  (sandboxed on this origin)
             %[7]s
  metrics    curl -H "Authorization: Bearer $(cat %[10]s)" %[1]s/metrics
  namespace  %[2]s
  events     %[3]s
  history    %[4]s
  data       %[5]s
  CLI        %[9]s

%[8]s

export SLESS_ENDPOINT=%[1]s
export SLESS_TOKEN=%[6]s
`, endpoint, ns, broker, hist, f.dataDir, token, own, isolation, cli, f.metricsTokenFile)
}

// currentUser names the OS user functions run as.
func currentUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return "uid " + strconv.Itoa(os.Getuid())
}

// ensureSecretFile writes a random token of 32 bytes, hex-encoded, to path unless it exists.
func ensureSecretFile(path string) error {
	if _, err := os.Stat(path); err == nil || !errors.Is(err, os.ErrNotExist) {
		return err
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return fmt.Errorf("generating %s: %w", path, err)
	}
	return cli.WriteSecret(path, []byte(hex.EncodeToString(b)+"\n"))
}

// devSigningKey loads the HS256 key of the data directory, creating a random one on first
// use. Tokens printed by earlier runs stay valid across restarts.
func devSigningKey(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		key, err := hex.DecodeString(strings.TrimSpace(string(data)))
		if err != nil || len(key) < 32 {
			return nil, fmt.Errorf("dev signing key %s is not 32+ hex-encoded bytes; delete it to generate a new one", path)
		}
		return key, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("reading the dev signing key: %w", err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generating the dev signing key: %w", err)
	}
	if err := cli.WriteSecret(path, []byte(hex.EncodeToString(key)+"\n")); err != nil {
		return nil, err
	}
	return key, nil
}

// devToken signs a token the gateway verifies like any other JWT.
func devToken(key []byte, subject string, ttl time.Duration) (string, error) {
	now := time.Now()
	claims := jwt.RegisteredClaims{Subject: subject, IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl))}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(key)
	if err != nil {
		return "", fmt.Errorf("signing the dev token: %w", err)
	}
	return s, nil
}

// openDevHistory picks PostgreSQL when configured, else the bounded in-memory store.
func openDevHistory(ctx context.Context, f devFlags, log *slog.Logger) (history.Recorder, history.Reader, func(), error) {
	if f.databaseURL == "" {
		m := history.NewMemory(f.historySize)
		return m, m, func() {}, nil
	}
	pg, err := history.OpenPostgres(f.databaseURL, history.PostgresOptions{Logger: log})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--database-url: %w", err)
	}
	if err := pg.Migrate(ctx); err != nil {
		closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = pg.Close(closeCtx)
		return nil, nil, nil, fmt.Errorf("--database-url: %w", err)
	}
	closeFn := func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := pg.Close(closeCtx); err != nil {
			log.Warn("Warning: invocation history not fully written", "error", err)
		}
	}
	return pg, pg, closeFn, nil
}
