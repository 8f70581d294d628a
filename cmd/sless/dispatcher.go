package main

import (
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"

	"sless.dev/sless/cmd/sless/cli"
	"sless.dev/sless/dispatcher"
	"sless.dev/sless/gateway"
	"sless.dev/sless/gateway/cluster"
	"sless.dev/sless/history"
	"sless.dev/sless/rules"
	"sless.dev/sless/triggers"
	"sless.dev/sless/triggers/kind"
)

func init() { subcommands = append(subcommands, newDispatcherCmd) }

// Exit codes of `sless dispatcher`: 1 is any other failure (the broker unreachable when
// stopping, ...).
const (
	dispatcherExitConfig = 2 // bad flags, queue-argument mismatch, refused credentials
	dispatcherExitFailed = 3 // fire mode: the function failed on every attempt
)

// dispatcherCommon are the flags the consumers and the one-invocation commands share.
type dispatcherCommon struct {
	function, trigger, targetURL, targetHost, databaseURL, logLevel string
	identityKey, identityMaster                                     string
	memoryMB                                                        int32
	retry                                                           dispatcher.RetryPolicy
	timeout                                                         time.Duration
	maskSecrets, targets                                            []string
}

func (c *dispatcherCommon) bind(fs *pflag.FlagSet) {
	fs.StringVar(&c.function, "function", "", "function to invoke, namespace/name (required)")
	fs.StringVar(&c.trigger, "trigger", "", "trigger name, recorded in the invocation history")
	fs.Int32Var(&c.memoryMB, "memory-mb", 0, "the function's memory in MiB, what the invocations' GB-seconds are counted by in the usage (0: not known, none counted)")
	fs.StringVar(&c.targetURL, "target-url", "", "URL invocations are POSTed to: the KEDA HTTP interceptor, or http://<gateway>/fn/<ns>/<name> (required; the gateway removes the X-Sless-* trigger headers, as it does from any caller)")
	fs.StringVar(&c.targetHost, "target-host", "", "Host header for the target, e.g. <name>.<ns>.fn.sless.local when the target is the interceptor")
	fs.StringArrayVar(&c.targets, "target", nil, "a revision the calls go to through the interceptor and its share, <revision host>=<percent> (repeatable; replaces --target-host): the operator renders the function's traffic")
	fs.StringVar(&c.databaseURL, "database-url", "", "PostgreSQL URL for the invocation history (none: not recorded)")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.IntVar(&c.retry.MaxAttempts, "max-attempts", 3, "attempts per message or tick, the first included")
	fs.DurationVar(&c.retry.Backoff, "backoff", time.Second, "delay before the second attempt; doubles per attempt")
	fs.DurationVar(&c.retry.MaxBackoff, "max-backoff", time.Minute, "cap on the delay between attempts")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Minute, "per-invocation timeout (the function's timeout plus a margin)")
	fs.StringVar(&c.identityKey, "identity-key", "", "the function's key (64 hex digits) every call is signed with, which its wrapper checks; set it as SLESS_IDENTITY_KEY (the operator renders it from the function's Secret), never on the command line")
	fs.StringVar(&c.identityMaster, "identity-master", "", "the platform's master key (64 hex digits) the function's key is derived from, instead of --identity-key; set it as SLESS_IDENTITY_MASTER")
	fs.StringSliceVar(&c.maskSecrets, "mask-secrets", nil, "secrets of the function's namespace whose values are masked (***) in what is recorded: read through the Kubernetes API with the pod's service account, again every "+maskRefresh.String())
}

// dispatcherRuntime is what both modes run with; stop flushes traces and buffered history.
type dispatcherRuntime struct {
	log      *slog.Logger
	function dispatcher.FunctionRef
	invoker  dispatcher.Invoker
	recorder history.Recorder
	// store is the database behind recorder, when there is one.
	store *history.Postgres
	stop  func()
}

// start reads SLESS_* fallbacks, then sets up logging, tracing (OTLP when OTEL_* is set), the
// invoker and the history recorder.
func (c *dispatcherCommon) start(cmd *cobra.Command, concurrency int) (*dispatcherRuntime, error) {
	if err := dispatcherFlagsFromEnv(cmd.Flags()); err != nil {
		return nil, &dispatcher.ConfigError{Field: "env", Reason: err.Error(), Err: err}
	}
	log, err := newLogger(cmd, c.logLevel)
	if err != nil {
		return nil, &dispatcher.ConfigError{Field: "log-level", Reason: err.Error(), Err: err}
	}
	log = log.With("component", "dispatcher")
	fn, err := dispatcher.ParseFunctionRef(c.function)
	if err != nil {
		return nil, err
	}
	fn.MemoryMB = c.memoryMB
	httpInv, err := dispatcher.NewHTTPInvoker(c.targetURL, c.targetHost, concurrency)
	if err != nil {
		return nil, err
	}
	for _, t := range c.targets {
		target, err := dispatcher.ParseTarget(t)
		if err != nil {
			return nil, err
		}
		httpInv.Targets = append(httpInv.Targets, target)
	}
	if httpInv.Key, err = c.signingKey(fn); err != nil {
		return nil, err
	}
	if httpInv.Key == nil {
		log.Warn("Warning: no identity key (SLESS_IDENTITY_KEY or SLESS_IDENTITY_MASTER): calls go unsigned, and a function holding a key refuses them")
	}
	var inv dispatcher.Invoker = httpInv
	if len(c.maskSecrets) > 0 {
		cfg, err := ctrlconfig.GetConfig()
		if err != nil {
			return nil, &dispatcher.ConfigError{Field: "mask-secrets", Reason: "no Kubernetes API credentials to read the secrets with: " + err.Error(), Err: err}
		}
		kc, err := client.New(cfg, client.Options{})
		if err != nil {
			return nil, &dispatcher.ConfigError{Field: "mask-secrets", Reason: err.Error(), Err: err}
		}
		m := &cluster.SecretMaskSource{Client: kc, Namespace: fn.Namespace, Names: c.maskSecrets, Refresh: maskRefresh}
		inv = dispatcher.MaskingInvoker{Inner: inv, Masker: m.Masker}
	}
	stopTelemetry, err := gateway.SetupTelemetry(cmd.Context(), "sless-dispatcher")
	if err != nil {
		return nil, err
	}
	rt := &dispatcherRuntime{log: log, function: fn, invoker: inv,
		stop: func() { shutdownWithin(10*time.Second, stopTelemetry, log, "telemetry export") }}
	if c.databaseURL == "" {
		return rt, nil
	}
	// One consumer records at most its own message rate: a short buffer (two COPY batches)
	// keeps the ring of pending records from costing the pod 1.5 MB of the gateway's 8192.
	// While the database takes writes but slower than the burst (a loaded disk), the consumer
	// waits for room instead of dropping: it slows down, the history stays whole.
	store, err := history.OpenPostgres(c.databaseURL, history.PostgresOptions{Logger: log, BufferSize: 1024, FullWait: time.Second})
	if err != nil {
		rt.stop()
		return nil, &dispatcher.ConfigError{Field: "database-url", Reason: err.Error(), Err: err}
	}
	rt.recorder, rt.store = store, store
	rt.stop = func() {
		shutdownWithin(10*time.Second, store.Close, log, "invocation history")
		shutdownWithin(10*time.Second, stopTelemetry, log, "telemetry export")
	}
	return rt, nil
}

// apply sets cfg's function, trigger, retry policy, timeout, invoker, recorder and logger
// from the shared flags and rt.
func (c *dispatcherCommon) apply(cfg *dispatcher.Config, rt *dispatcherRuntime) {
	cfg.Function, cfg.Trigger, cfg.Invoker, cfg.Recorder, cfg.Logger = rt.function, c.trigger, rt.invoker, rt.recorder, rt.log
	cfg.Retry, cfg.Timeout = c.retry, c.timeout
}

// signingKey is the key calls to fn are signed with: --identity-key, else derived from
// --identity-master; nil with neither.
func (c *dispatcherCommon) signingKey(fn dispatcher.FunctionRef) ([]byte, error) {
	if c.identityKey != "" && c.identityMaster != "" {
		return nil, &dispatcher.ConfigError{Field: "identity-key", Reason: "give the function's key or the master it is derived from, not both"}
	}
	for _, k := range []struct{ field, hex string }{{"identity-key", c.identityKey}, {"identity-master", c.identityMaster}} {
		if k.hex == "" {
			continue
		}
		key, err := hex.DecodeString(k.hex)
		if err != nil || len(key) != rules.IdentityMasterBytes {
			return nil, &dispatcher.ConfigError{Field: k.field, Reason: "not 64 hex digits"}
		}
		if k.field == "identity-master" {
			key = rules.FunctionKey(key, fn.Namespace, fn.Name)
		}
		return key, nil
	}
	return nil, nil
}

// maskRefresh is how often a dispatcher reads the secrets it masks again: a rotated value is
// masked within it.
const maskRefresh = 5 * time.Second

// newDispatcherCmd is `sless dispatcher`: the command of each trigger kind that consumes a
// broker (kind.Consumer), under it or as it, and of each that makes one invocation per pod
// (kind.Firer: `fire` for cron ticks) under it.
func newDispatcherCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "dispatcher", Short: "Invoke a function for a trigger's messages or ticks", Args: cobra.NoArgs}
	for _, k := range triggers.All() {
		if c, ok := k.(kind.Consumer); ok {
			d := c.Dispatcher()
			target := cmd
			if d.Use != "" {
				target = &cobra.Command{Use: d.Use, Args: cobra.NoArgs}
				cmd.AddCommand(target)
			}
			bindConsumer(target, d)
		}
		if f, ok := k.(kind.Firer); ok {
			cmd.AddCommand(newFireCmd(f.FireCommand()))
		}
	}
	return cmd
}

// bindConsumer makes cmd consume the source of d with the flags every consumer shares.
func bindConsumer(cmd *cobra.Command, d kind.DispatcherCommand) {
	var (
		common                 dispatcherCommon
		cfg                    dispatcher.Config
		maxBody                int
		exitWhenEmpty, async   bool
		idleTimeout, drainTime time.Duration
	)
	cmd.Short, cmd.Long = d.Short, d.Long
	fs := cmd.Flags()
	source := d.Bind(fs)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		rt, err := common.start(cmd, cfg.Concurrency)
		if err != nil {
			return dispatcherExit(err)
		}
		defer rt.stop()
		common.apply(&cfg, rt)
		cfg.MaxBodyBytes = maxBody
		cfg.ExitWhenEmpty, cfg.IdleTimeout, cfg.DrainTimeout = exitWhenEmpty, idleTimeout, drainTime
		if async {
			if rt.store == nil {
				return dispatcherExit(&dispatcher.ConfigError{Field: "database-url", Reason: "--async keeps the invocations' records there: set it (or SLESS_DATABASE_URL)"})
			}
			cfg.Async = rt.store
		}
		src, err := source(cfg)
		if err != nil {
			return dispatcherExit(err)
		}
		_, err = dispatcher.Run(cmd.Context(), cfg, src)
		return dispatcherExit(err)
	}
	common.bind(fs)
	fs.IntVar(&cfg.Concurrency, "concurrency", 4, "prefetch: messages processed at once")
	fs.IntVar(&maxBody, "max-body-bytes", 1<<20, "larger messages are dead-lettered")
	fs.BoolVar(&exitWhenEmpty, "exit-when-empty", false, "exit once the queue stayed empty for --idle-timeout (ScaledJob jobs)")
	fs.DurationVar(&idleTimeout, "idle-timeout", 2*time.Second, "how long the queue must stay empty before --exit-when-empty exits")
	fs.BoolVar(&async, "async", false, "the queue holds asynchronous invocations (Prefer: respond-async): replay each caller's request and keep its record in --database-url")
	fs.IntVar(&cfg.MaxMessages, "max-messages", 0, "exit after taking this many messages (0: no limit)")
	fs.DurationVar(&drainTime, "drain-timeout", 25*time.Second, "on SIGTERM, how long in-flight invocations may finish")
}

// newFireCmd is the one-invocation command of d with the flags it shares with the consumers.
func newFireCmd(d kind.FireCommand) *cobra.Command {
	var common dispatcherCommon
	cmd := &cobra.Command{Use: d.Use, Short: d.Short, Long: d.Long, Args: cobra.NoArgs}
	common.bind(cmd.Flags())
	fire := d.Bind(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		rt, err := common.start(cmd, 1)
		if err != nil {
			return dispatcherExit(err)
		}
		defer rt.stop()
		var cfg dispatcher.Config
		common.apply(&cfg, rt)
		return dispatcherExit(fire(cmd.Context(), cfg))
	}
	return cmd
}

// dispatcherFlagsFromEnv fills every flag not given on the command line from SLESS_<FLAG>
// (dashes become underscores), parsed by the flag itself.
func dispatcherFlagsFromEnv(fs *pflag.FlagSet) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		env := "SLESS_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok && !f.Changed && f.Name != "help" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", env, v, err))
			}
		}
	})
	return errors.Join(errs...)
}

func dispatcherExit(err error) error {
	var cfgErr *dispatcher.ConfigError
	var invErr *dispatcher.InvocationError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &cfgErr):
		return &cli.ExitError{Code: dispatcherExitConfig, Err: err}
	case errors.As(err, &invErr):
		return &cli.ExitError{Code: dispatcherExitFailed, Err: err}
	}
	return err
}
