// Package devplane is the control plane of `sless dev`, the local counterpart of the
// reconcilers and KEDA: functions, triggers and jobs live in a state file in the data
// directory, uploads are built on this machine (buildkit's local builds, cached by content
// hash) and run as processes of scaling/pool; cron and AMQP triggers fire through the
// dispatcher package. It implements the gateway's Backend, so the REST API and /fn/ in
// front of it are the cluster gateway's, unchanged.
package devplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/gateway"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/history"
	"sless.dev/sless/scaling/pool"
)

// Options configures the local backend.
type Options struct {
	// DataDir holds the state file and, unless BuildDir is set, the local builds.
	DataDir string
	// BuildDir holds local builds, one directory per runtime and content hash. Default
	// DataDir/builds; several data directories may share one.
	BuildDir string
	// Artifacts is where uploads are stored (the gateway writes them; builds read them).
	Artifacts buildkit.Artifacts
	// GatewayURL is the public base URL shown in function and trigger URLs.
	GatewayURL string
	// AMQPURL is the broker of event triggers; without it event triggers stay inactive.
	AMQPURL string
	// Recorder receives cron, event and job invocations (the gateway records /fn/ calls).
	Recorder history.Recorder
	// Builder builds uploads; its Logger defaults to Logger.
	Builder buildkit.LocalBuilder
	// Pool tunes the process pool.
	Pool pool.Options
	// Domain suffixes routing hosts (<name>.<ns>.<domain>). Default "fn.sless.local".
	Domain string
	// MaxBuilds caps concurrent builds. Default 2.
	MaxBuilds int
	Logger    *slog.Logger
}

// Backend implements gateway.Backend on this machine.
type Backend struct {
	opts Options
	log  *slog.Logger
	file stateFile
	pool *pool.Pool

	mu sync.RWMutex
	st *state
	// deployed holds what the pool serves, by function key.
	deployed map[string]deployment

	builds  builds
	work    keyed
	runners runners
	jobs    jobRuns

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	unlock func() // releases the data directory
}

var _ gateway.Backend = (*Backend)(nil)

// New loads the state from opts.DataDir and brings every function, trigger and job back to
// its declared state (builds are found again by content hash, so nothing is rebuilt). Close
// stops everything it started.
func New(opts Options) (*Backend, error) {
	if opts.DataDir == "" {
		return nil, errors.New("local backend: DataDir is required")
	}
	if opts.Artifacts.Store == nil {
		return nil, errors.New("local backend: an artifact store is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Builder.Logger == nil {
		opts.Builder.Logger = opts.Logger
	}
	if opts.Pool.Logger == nil {
		opts.Pool.Logger = opts.Logger
	}
	if opts.BuildDir == "" {
		opts.BuildDir = filepath.Join(opts.DataDir, "builds")
	}
	if opts.Domain == "" {
		opts.Domain = "fn.sless.local"
	}
	if opts.MaxBuilds <= 0 {
		opts.MaxBuilds = 2
	}
	if opts.Recorder == nil {
		opts.Recorder = discard{}
	}
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the data directory %s: %w", opts.DataDir, err)
	}
	unlock, err := lockDataDir(opts.DataDir)
	if err != nil {
		return nil, err
	}
	file := stateFile{path: filepath.Join(opts.DataDir, "state.json")}
	st, err := file.load()
	if err != nil {
		unlock()
		return nil, err
	}
	var b *Backend
	if opts.Pool.OnStart == nil {
		opts.Pool.OnStart = func(host string, err error) { b.noteStart(host, err) }
	}
	if opts.Pool.RunDir == "" {
		opts.Pool.RunDir = filepath.Join(opts.DataDir, "run")
	}
	procs, err := pool.New(opts.Pool)
	if err != nil {
		unlock()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	b = &Backend{
		opts: opts, log: opts.Logger.With("component", "dev-backend"), file: file, st: st,
		pool: procs, deployed: map[string]deployment{},
		builds: newBuilds(opts.MaxBuilds), ctx: ctx, cancel: cancel,
		runners: runners{m: map[string]*runner{}}, jobs: jobRuns{m: map[string]context.CancelFunc{}},
		unlock: unlock,
	}
	b.interruptJobs()
	for _, r := range st.Functions {
		// Nothing runs yet: a function is Ready again only once this process has deployed it
		// (the reconcile observes the generation again and persists that).
		r.ObservedGeneration = 0
	}
	for key := range st.Functions {
		b.kickFunction(key)
	}
	for key := range st.Triggers {
		b.kickTrigger(key)
	}
	for key := range st.Jobs {
		b.kickJob(key)
	}
	return b, nil
}

// Close stops triggers, jobs and every function process.
func (b *Backend) Close() {
	b.cancel()
	b.runners.stopAll()
	b.work.wait()
	b.wg.Wait()
	b.pool.Close()
	b.unlock()
}

// lockDataDir makes sure one process at a time owns a data directory: two would overwrite
// each other's state.
func lockDataDir(dir string) (func(), error) {
	path := filepath.Join(dir, "lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking the data directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("data directory %s is in use by another sless dev (%v); stop it or pass another --data-dir", dir, err)
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// Transport carries /fn/ requests to the process pool; the Host names the function.
func (b *Backend) Transport() http.RoundTripper { return b.pool }

// Pool exposes the process pool (process counts and addresses, for tests and benchmarks).
func (b *Backend) Pool() *pool.Pool { return b.pool }

// Route answers from memory.
func (b *Backend) Route(ns, name string) (gateway.Route, error) {
	key := objectKey(ns, name)
	b.mu.RLock()
	defer b.mu.RUnlock()
	fn, ok := b.st.Functions[key]
	if !ok {
		return gateway.Route{}, &gateway.NotFoundError{Kind: "function", Namespace: ns, Name: name}
	}
	r := gateway.Route{Host: b.deployed[key].host, Timeout: time.Duration(fn.Spec.TimeoutSec) * time.Second}
	r.RequireAuth, r.Disabled = b.httpGateLocked(ns, name)
	return r, nil
}

// httpGateLocked reports whether an enabled http trigger of the function requires auth and
// whether all of its http triggers are disabled (a function without any stays reachable).
func (b *Backend) httpGateLocked(ns, name string) (requireAuth, disabled bool) {
	httpTriggers, enabled := 0, 0
	for _, t := range b.st.Triggers {
		if t.Namespace != ns || t.Spec.Function != name || t.Spec.Type != api.TriggerHTTP {
			continue
		}
		httpTriggers++
		if t.Spec.Enabled {
			enabled++
			requireAuth = requireAuth || t.Spec.RequireAuth
		}
	}
	return requireAuth, httpTriggers > 0 && enabled == 0
}

func (b *Backend) routingHost(ns, name string) string {
	return name + "." + ns + "." + b.opts.Domain
}

func (b *Backend) functionURL(ns, name string) string {
	return strings.TrimSuffix(b.opts.GatewayURL, "/") + "/fn/" + ns + "/" + name
}

// commitLocked persists the state; on failure undo restores the previous in-memory state so
// nothing unacknowledged is visible.
func (b *Backend) commitLocked(undo func()) error {
	if err := b.file.save(b.st); err != nil {
		undo()
		return err
	}
	return nil
}

// EnsureNamespace records the namespace.
func (b *Backend) EnsureNamespace(_ context.Context, ns string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.st.Namespaces[ns] {
		return nil
	}
	b.st.Namespaces[ns] = true
	return b.commitLocked(func() { delete(b.st.Namespaces, ns) })
}

func newMeta(ns, name string) meta {
	return meta{Namespace: ns, Name: name, CreatedAt: time.Now().UTC().Truncate(time.Second), Generation: 1}
}

func notFound(kind, ns, name string) error {
	return &gateway.NotFoundError{Kind: kind, Namespace: ns, Name: name}
}

func exists(kind, ns, name string) error {
	return &gateway.ConflictError{Kind: kind, Namespace: ns, Name: name, Reason: "already exists"}
}

func functionOf(r *functionRecord) api.Function {
	st := r.Status
	st.Ready = st.Phase == api.PhaseReady && r.ObservedGeneration == r.Generation
	return api.Function{Name: r.Name, Namespace: r.Namespace, CreatedAt: r.CreatedAt, FunctionSpec: cloneFunctionSpec(r.Spec), Status: st}
}

func triggerOf(r *triggerRecord) api.Trigger {
	return api.Trigger{Name: r.Name, Namespace: r.Namespace, CreatedAt: r.CreatedAt, TriggerSpec: r.Spec, Status: r.Status}
}

func jobOf(r *jobRecord) api.Job {
	return api.Job{Name: r.Name, Namespace: r.Namespace, CreatedAt: r.CreatedAt, JobSpec: cloneJobSpec(r.Spec), Status: r.Status}
}

func cloneFunctionSpec(s api.FunctionSpec) api.FunctionSpec {
	s.EnvVars = maps.Clone(s.EnvVars)
	if s.Source != nil {
		src := *s.Source
		s.Source = &src
	}
	return s
}

func cloneJobSpec(s api.JobSpec) api.JobSpec {
	s.EnvVars = maps.Clone(s.EnvVars)
	if s.Source != nil {
		src := *s.Source
		s.Source = &src
	}
	s.Event = slices.Clone(s.Event)
	return s
}

// equalJSON compares specs by their wire form (maps and pointers compare by content).
func equalJSON(a, b any) bool {
	x, errA := json.Marshal(a)
	y, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(x) == string(y)
}

type discard struct{}

func (discard) Record(history.Record) {}
