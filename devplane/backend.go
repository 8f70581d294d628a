// Package devplane is the control plane of `sless dev`, the local counterpart of the
// reconcilers and KEDA: functions, triggers and jobs live in the data directory (store.go),
// uploads are built on this machine (buildkit's local builds, cached by tenant and content
// hash) and run as processes of devplane/pool; cron and AMQP triggers fire through the
// dispatcher package. It implements backend.Backend, so the REST API and /fn/ in
// front of it are the cluster gateway's, unchanged.
package devplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/client-go/util/workqueue"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/devplane/pool"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/history"
	"sless.dev/sless/rules"
	triggerkinds "sless.dev/sless/triggers"
	"sless.dev/sless/triggers/rabbitmq/amqpsource"
)

// Options configures the dev plane.
type Options struct {
	// DataDir holds the state and, unless BuildDir is set, the local builds.
	DataDir string
	// BuildDir holds local builds, one directory per tenant, runtime and content hash.
	// Default DataDir/builds; several data directories may share one.
	BuildDir string
	// Artifacts is where uploads are stored (the gateway writes them; builds read them).
	Artifacts buildkit.Artifacts
	// GatewayURL is the public base URL shown in function and trigger URLs.
	GatewayURL string
	// AMQPURL is the broker of event triggers; without it event triggers stay inactive.
	AMQPURL string
	// Recorder receives cron, event, asynchronous and job invocations (the gateway records
	// /fn/ calls).
	Recorder history.Recorder
	// History reads invocations back: a rollout judges each step by the new revision's
	// calls there. Without it a rollout holds at its first step.
	History history.Reader
	// AsyncStore keeps asynchronous invocations; default files under DataDir/async/records.
	AsyncStore history.AsyncStore
	// Builder builds uploads; its Logger defaults to Logger.
	Builder buildkit.LocalBuilder
	// Pool tunes the process pool.
	Pool pool.Options
	// Domain suffixes routing hosts (<name>.<ns>.<domain>). Default "fn.sless.local".
	Domain string
	// MaxBuilds caps concurrent builds. Default 2.
	MaxBuilds int
	// BuildTimeout bounds one build. Default 10 minutes.
	BuildTimeout time.Duration
	// SharedCacheDir holds what sandboxed builds of every tenant read and none writes (the
	// Go standard library compiled by the platform), shared by the data directories of this
	// machine. Default /var/cache/sless.
	SharedCacheDir string
	// MaxPerNamespace caps the functions, the triggers and the jobs of one namespace (each),
	// so one tenant cannot fill the machine. Default 200.
	MaxPerNamespace int
	// Workers reconcile objects in parallel (one object at a time each). Default 8.
	Workers int
	// RetryBase and RetryMax bound the backoff of a reconcile that failed for a reason
	// outside the user's spec (a full disk, an unreachable store). Defaults 100ms and 30s.
	RetryBase, RetryMax time.Duration
	Logger              *slog.Logger
}

func (o Options) withDefaults() (Options, error) {
	if o.DataDir == "" {
		return o, errors.New("dev plane: DataDir is required")
	}
	if o.Artifacts.Store == nil {
		return o, errors.New("dev plane: an artifact store is required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Builder.Logger == nil {
		o.Builder.Logger = o.Logger
	}
	o.Builder.Seal = true // a function must not change what its next start runs
	if o.Pool.Logger == nil {
		o.Pool.Logger = o.Logger
	}
	if o.Pool.RunDir == "" {
		o.Pool.RunDir = filepath.Join(o.DataDir, "run")
	}
	if o.BuildDir == "" {
		o.BuildDir = filepath.Join(o.DataDir, "builds")
	}
	// A sandboxed function sees its own build only, even where /opt or /etc holds these.
	o.Pool.Sandbox.Hide = append(o.Pool.Sandbox.Hide, o.DataDir, o.BuildDir)
	if o.Domain == "" {
		o.Domain = rules.DefaultDomain
	}
	if o.MaxBuilds <= 0 {
		o.MaxBuilds = 2
	}
	if o.BuildTimeout <= 0 {
		o.BuildTimeout = 10 * time.Minute
	}
	if o.SharedCacheDir == "" {
		o.SharedCacheDir = DefaultSharedCacheDir
	}
	// Sandboxed builds keep each tenant's caches here; the Go standard library is laid under
	// them read-only.
	if o.Pool.Build.CacheDir == "" {
		o.Pool.Build.CacheDir = filepath.Join(o.DataDir, "build-cache")
	}
	if o.Pool.Build.Layers == nil {
		o.Pool.Build.Layers = map[string]string{buildkit.GoBuildCache: filepath.Join(o.SharedCacheDir, buildkit.GoBuildCache)}
	}
	if o.MaxPerNamespace <= 0 {
		o.MaxPerNamespace = 200
	}
	if o.Workers <= 0 {
		o.Workers = 8
	}
	if o.RetryBase <= 0 {
		o.RetryBase = 100 * time.Millisecond
	}
	if o.RetryMax <= 0 {
		o.RetryMax = 30 * time.Second
	}
	if o.Recorder == nil {
		o.Recorder = discard{}
	}
	return o, nil
}

// Backend implements backend.Backend on this machine.
type Backend struct {
	opts    Options
	log     *slog.Logger
	store   *store
	secrets *secretStore
	pool    *pool.Pool
	// identity is the master key every function's key derives from (rules.FunctionKey):
	// the gateway and the trigger runners sign calls with them, the processes check them.
	identity []byte

	// deployed holds what the pool serves, by function key; routes is the /fn/ table built
	// from it and the store's snapshot after every change, read without locks.
	depMu    sync.Mutex
	deployed map[string]deployment
	routes   atomic.Pointer[map[string]backend.Route]

	builds  builds
	logs    *logStore
	queue   workqueue.TypedRateLimitingInterface[string]
	runners runners
	jobs    jobRuns
	// async queues asynchronous invocations: the broker's Publisher, or files (then files is
	// set); asyncStore keeps their records.
	async      backend.AsyncInvoker
	asyncStore history.AsyncStore
	files      *fileQueue

	ctx     context.Context
	cancel  context.CancelFunc
	workers sync.WaitGroup
	wg      sync.WaitGroup // job runs
	unlock  func()         // releases the data directory
}

var _ backend.Backend = (*Backend)(nil)

// New loads the state from opts.DataDir and brings every function, trigger and job back to
// its declared state (builds are found again by content hash, so nothing is rebuilt). Close
// stops everything it started.
func New(opts Options) (*Backend, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the data directory %s: %w", opts.DataDir, err)
	}
	unlock, err := lockDataDir(opts.DataDir)
	if err != nil {
		return nil, err
	}
	st, err := openStore(filepath.Join(opts.DataDir, "state"), filepath.Join(opts.DataDir, "state.json"))
	if err != nil {
		unlock()
		return nil, err
	}
	secrets, err := openSecrets(opts.DataDir)
	if err != nil {
		unlock()
		return nil, err
	}
	identity, err := dataKey(filepath.Join(opts.DataDir, "identity.key"), "the identity master key",
		"remove it to have a new one made (every function restarts with its new key)")
	if err != nil {
		unlock()
		return nil, err
	}
	b := &Backend{opts: opts, log: opts.Logger.With("component", "devplane"), store: st, secrets: secrets, identity: identity,
		deployed: map[string]deployment{}, builds: newBuilds(opts.MaxBuilds),
		logs:    &logStore{dir: filepath.Join(opts.DataDir, "logs"), m: map[string]*objectLog{}},
		runners: runners{m: map[string]*runner{}}, jobs: jobRuns{m: map[string]context.CancelFunc{}}, unlock: unlock}
	if err := b.openAsync(); err != nil {
		unlock()
		return nil, err
	}
	if opts.Pool.OnStart == nil {
		opts.Pool.OnStart = b.noteStart
	}
	if opts.Pool.OnOutput == nil {
		opts.Pool.OnOutput = b.onOutput
	}
	if b.pool, err = pool.New(opts.Pool); err != nil {
		unlock()
		return nil, err
	}
	// Nothing a tenant uploads runs with sless dev's privileges: where functions are
	// sandboxed, so are the builds that run their installers and compilers.
	b.opts.Builder.Sandbox = b.pool.BuildSandbox()
	if b.opts.Builder.Sandbox != nil {
		// The first Go build waits for it; started now, most of it is done by then.
		go func() { _ = b.warmGo(context.Background(), "go1.25") }()
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	st.published = func(*snapshot) { b.rebuildRoutes() }
	b.rebuildRoutes()
	b.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](opts.RetryBase, opts.RetryMax),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "devplane"})
	b.interruptJobs()
	for range opts.Workers {
		b.workers.Add(1)
		go b.work()
	}
	snap := st.snapshot()
	for key, fn := range snap.functions {
		// Nothing runs yet after a restart: a Ready kept from the last run would send callers
		// to a route with no process until the first reconcile has deployed it again.
		if fn.Status.Phase == api.PhaseReady {
			if err := b.setFunctionStatus(key, fn.ObservedGeneration, func(st *api.FunctionStatus) {
				st.Phase, st.Message = api.PhasePending, "starting after a restart of sless dev"
			}); err != nil {
				b.Close()
				return nil, err
			}
		}
		b.kickFunction(key)
	}
	for key := range snap.triggers {
		b.kickTrigger(key)
	}
	for key := range snap.jobs {
		b.kickJob(key)
	}
	return b, nil
}

// Close stops triggers, jobs and every function process.
func (b *Backend) Close() {
	b.cancel()
	b.queue.ShutDown()
	b.workers.Wait()
	b.runners.stopAll()
	if p, ok := b.async.(*amqpsource.Publisher); ok {
		p.Close()
	}
	b.wg.Wait()
	b.pool.Close()
	b.unlock()
}

// lockDataDir makes sure one process at a time owns a data directory: two would overwrite
// each other's state.
func lockDataDir(dir string) (func(), error) {
	unlock, err := flock(filepath.Join(dir, "lock"), false)
	if err != nil {
		return nil, fmt.Errorf("data directory %s is in use by another sless dev (%v); stop it or pass another --data-dir", dir, err)
	}
	return unlock, nil
}

// flock takes an exclusive lock on path, waiting for it when wait is set.
func flock(path string, wait bool) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	how := syscall.LOCK_EX
	if !wait {
		how |= syscall.LOCK_NB
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, err
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// work runs reconciles until the queue shuts down; a failed one is retried with backoff.
func (b *Backend) work() {
	defer b.workers.Done()
	for {
		item, quit := b.queue.Get()
		if quit {
			return
		}
		if err := b.reconcile(item); err != nil && b.ctx.Err() == nil {
			b.log.Warn("Warning: reconcile failed; retrying", "object", item, "error", err)
			b.queue.AddRateLimited(item)
		} else {
			b.queue.Forget(item)
		}
		b.queue.Done(item)
	}
}

func (b *Backend) kickFunction(key string) { b.queue.Add("function/" + key) }
func (b *Backend) kickTrigger(key string)  { b.queue.Add("trigger/" + key) }
func (b *Backend) kickJob(key string)      { b.queue.Add("job/" + key) }

// reconcile dispatches a queued item to its kind's reconcile.
func (b *Backend) reconcile(item string) error {
	kind, key, _ := strings.Cut(item, "/")
	switch kind {
	case "function":
		return b.reconcileFunction(key)
	case "trigger":
		return b.reconcileTrigger(key)
	case "job":
		return b.reconcileJob(key)
	}
	return nil
}

// Transport carries /fn/ requests to the process pool; the Host names a revision (or a
// function, whose traffic then picks one).
func (b *Backend) Transport() http.RoundTripper { return revisionRouter{b} }

// Pool exposes the process pool (process counts and addresses, for tests and benchmarks).
func (b *Backend) Pool() *pool.Pool { return b.pool }

// Route answers from the routes table of the last change: no lock, no scan.
func (b *Backend) Route(ns, name string) (backend.Route, error) {
	r, ok := (*b.routes.Load())[objectKey(ns, name)]
	if !ok {
		return backend.Route{}, notFound("function", ns, name)
	}
	return r, nil
}

// rebuildRoutes makes the /fn/ table from the current snapshot and what is deployed.
func (b *Backend) rebuildRoutes() {
	b.depMu.Lock()
	defer b.depMu.Unlock()
	routes := routesOf(b.store.snapshot(), func(r *functionRecord) []backend.RouteTarget {
		return b.targetsOf(r, b.deployed[objectKey(r.Namespace, r.Name)])
	})
	b.routes.Store(&routes)
}

// routesOf is the route of every function in snap, to the revisions targetsOf says.
// Asynchronous calls are taken as soon as async is on: sless dev drains them itself.
func routesOf(snap *snapshot, targetsOf func(*functionRecord) []backend.RouteTarget) map[string]backend.Route {
	gates := httpGates(snap)
	routes := make(map[string]backend.Route, len(snap.functions))
	for key, fn := range snap.functions {
		r := backend.RouteOf("", fn.Spec.TimeoutSec, fn.Spec.StreamIdleTimeoutSec, fn.Spec.MemoryMB, gates[key], fn.Spec.Async.Enabled, fn.Spec.Async.MaxAttempts)
		r.Targets = targetsOf(fn)
		routes[key] = r
	}
	return routes
}

// httpGates is the gate of every function with triggers of a kind that routes (http).
func httpGates(snap *snapshot) map[string]rules.Gate {
	byFunction := map[string][]rules.HTTPTrigger{}
	for _, t := range snap.triggers {
		if k, ok := triggerkinds.Lookup(t.Spec.Type); ok && k.Routes() {
			key := objectKey(t.Namespace, t.Spec.Function)
			byFunction[key] = append(byFunction[key], rules.HTTPTrigger{Enabled: t.Spec.Enabled, RequireAuth: t.Spec.RequireAuth})
		}
	}
	gates := make(map[string]rules.Gate, len(byFunction))
	for key, ts := range byFunction {
		gates[key] = rules.HTTPGate(ts)
	}
	return gates
}

func (b *Backend) routingHost(ns, name string) string {
	return rules.RoutingHost(ns, name, b.opts.Domain)
}

func (b *Backend) functionURL(ns, name string) string {
	return rules.FunctionURL(b.opts.GatewayURL, ns, name)
}

// EnsureNamespace records the namespace.
func (b *Backend) EnsureNamespace(_ context.Context, ns string) error {
	return b.store.write(false, func(tx *txn) error {
		tx.putNamespace(b.store.root, ns)
		return nil
	})
}

func newMeta(ns, name string) meta {
	return meta{Namespace: ns, Name: name, CreatedAt: time.Now().UTC().Truncate(time.Second), Generation: 1}
}

func notFound(kind, ns, name string) error {
	return &backend.NotFoundError{Kind: kind, Namespace: ns, Name: name}
}

func exists(kind, ns, name string) error {
	return &backend.ConflictError{Kind: kind, Namespace: ns, Name: name, Reason: "already exists"}
}

func functionOf(r *functionRecord) api.Function {
	st := r.Status.FunctionStatus
	st.Ready, st.Message = rules.FunctionView(st.Phase, st.Message, r.Generation, r.ObservedGeneration)
	return api.Function{Name: r.Name, Namespace: r.Namespace, CreatedAt: r.CreatedAt, FunctionSpec: cloneFunctionSpec(r.Spec), Status: st}
}

func triggerOf(r *triggerRecord) api.Trigger {
	return api.Trigger{Name: r.Name, Namespace: r.Namespace, CreatedAt: r.CreatedAt, TriggerSpec: r.Spec, Status: r.Status}
}

func jobOf(r *jobRecord) api.Job {
	return api.Job{Name: r.Name, Namespace: r.Namespace, CreatedAt: r.CreatedAt, JobSpec: cloneJobSpec(r.Spec), Status: r.Status}
}

// equalJSON compares values by their wire form (maps and pointers compare by content).
func equalJSON(a, b any) bool {
	x, errA := json.Marshal(a)
	y, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(x) == string(y)
}

type discard struct{}

func (discard) Record(history.Record) {}
