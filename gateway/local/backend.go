// Package local is the gateway's Backend for `sless dev`: functions, triggers and jobs live in
// a state file in the data directory, uploads are built on this machine (buildkit's local
// builds, cached by content hash) and run as processes of scaling/local's pool; cron and AMQP
// triggers fire through the dispatcher package. The REST API in front of it is the cluster
// gateway's, unchanged.
package local

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
	localpool "sless.dev/sless/scaling/local"
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
	Pool localpool.Options
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
	pool *localpool.Pool

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
	ctx, cancel := context.WithCancel(context.Background())
	var b *Backend
	if opts.Pool.OnStart == nil {
		opts.Pool.OnStart = func(host string, err error) { b.noteStart(host, err) }
	}
	b = &Backend{
		opts: opts, log: opts.Logger.With("component", "dev-backend"), file: file, st: st,
		pool: localpool.New(opts.Pool), deployed: map[string]deployment{},
		builds: newBuilds(opts.MaxBuilds), ctx: ctx, cancel: cancel,
		runners: runners{m: map[string]*runner{}}, jobs: jobRuns{m: map[string]context.CancelFunc{}},
		unlock: unlock,
	}
	b.interruptJobs()
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

// Pool exposes process counts (for tests and the console).
func (b *Backend) Pool() *localpool.Pool { return b.pool }

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

// --- functions ---

func (b *Backend) ListFunctions(_ context.Context, ns string) ([]api.Function, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	var out []api.Function
	for _, r := range b.st.Functions {
		if r.Namespace == ns {
			out = append(out, functionOf(r))
		}
	}
	slices.SortFunc(out, func(a, b api.Function) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (b *Backend) GetFunction(_ context.Context, ns, name string) (api.Function, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	r, ok := b.st.Functions[objectKey(ns, name)]
	if !ok {
		return api.Function{}, notFound("function", ns, name)
	}
	return functionOf(r), nil
}

func (b *Backend) CreateFunction(_ context.Context, ns, name string, spec api.FunctionSpec) (api.Function, error) {
	key := objectKey(ns, name)
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.st.Functions[key]; ok {
		return api.Function{}, exists("function", ns, name)
	}
	r := &functionRecord{meta: newMeta(ns, name), Spec: cloneFunctionSpec(spec), Status: api.FunctionStatus{Phase: api.PhasePending}}
	hadNS := b.st.Namespaces[ns]
	b.st.Functions[key], b.st.Namespaces[ns] = r, true
	if err := b.commitLocked(func() { delete(b.st.Functions, key); b.st.Namespaces[ns] = hadNS }); err != nil {
		return api.Function{}, err
	}
	b.kickFunction(key)
	return functionOf(r), nil
}

func (b *Backend) UpdateFunction(_ context.Context, ns, name string, mutate func(*api.FunctionSpec) error) (api.Function, error) {
	key := objectKey(ns, name)
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.st.Functions[key]
	if !ok {
		return api.Function{}, notFound("function", ns, name)
	}
	spec := cloneFunctionSpec(r.Spec)
	if err := mutate(&spec); err != nil {
		return api.Function{}, err
	}
	if equalJSON(spec, r.Spec) {
		return functionOf(r), nil // no change, no new generation (like an API server)
	}
	old, oldGen := r.Spec, r.Generation
	r.Spec, r.Generation = spec, r.Generation+1
	if err := b.commitLocked(func() { r.Spec, r.Generation = old, oldGen }); err != nil {
		return api.Function{}, err
	}
	b.kickFunction(key)
	return functionOf(r), nil
}

func (b *Backend) DeleteFunction(_ context.Context, ns, name string) error {
	key := objectKey(ns, name)
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.st.Functions[key]
	if !ok {
		return notFound("function", ns, name)
	}
	delete(b.st.Functions, key)
	if err := b.commitLocked(func() { b.st.Functions[key] = r }); err != nil {
		return err
	}
	b.kickFunction(key)
	return nil
}

// --- triggers ---

func (b *Backend) ListTriggers(_ context.Context, ns string) ([]api.Trigger, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	var out []api.Trigger
	for _, r := range b.st.Triggers {
		if r.Namespace == ns {
			out = append(out, triggerOf(r))
		}
	}
	slices.SortFunc(out, func(a, b api.Trigger) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (b *Backend) GetTrigger(_ context.Context, ns, name string) (api.Trigger, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	r, ok := b.st.Triggers[objectKey(ns, name)]
	if !ok {
		return api.Trigger{}, notFound("trigger", ns, name)
	}
	return triggerOf(r), nil
}

func (b *Backend) CreateTrigger(_ context.Context, ns, name string, spec api.TriggerSpec) (api.Trigger, error) {
	key := objectKey(ns, name)
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.st.Triggers[key]; ok {
		return api.Trigger{}, exists("trigger", ns, name)
	}
	r := &triggerRecord{meta: newMeta(ns, name), Spec: spec}
	hadNS := b.st.Namespaces[ns]
	b.st.Triggers[key], b.st.Namespaces[ns] = r, true
	if err := b.commitLocked(func() { delete(b.st.Triggers, key); b.st.Namespaces[ns] = hadNS }); err != nil {
		return api.Trigger{}, err
	}
	b.kickTrigger(key)
	b.kickFunction(objectKey(ns, spec.Function))
	return triggerOf(r), nil
}

func (b *Backend) UpdateTrigger(_ context.Context, ns, name string, mutate func(*api.TriggerSpec) error) (api.Trigger, error) {
	key := objectKey(ns, name)
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.st.Triggers[key]
	if !ok {
		return api.Trigger{}, notFound("trigger", ns, name)
	}
	spec := r.Spec
	if err := mutate(&spec); err != nil {
		return api.Trigger{}, err
	}
	if spec.Type != r.Spec.Type {
		return api.Trigger{}, &gateway.InvalidError{Field: "type", Reason: "type is immutable; delete and re-create the trigger"}
	}
	if spec == r.Spec {
		return triggerOf(r), nil
	}
	old, oldGen := r.Spec, r.Generation
	r.Spec, r.Generation = spec, r.Generation+1
	if err := b.commitLocked(func() { r.Spec, r.Generation = old, oldGen }); err != nil {
		return api.Trigger{}, err
	}
	b.kickTrigger(key)
	b.kickFunction(objectKey(ns, old.Function))
	b.kickFunction(objectKey(ns, spec.Function))
	return triggerOf(r), nil
}

func (b *Backend) DeleteTrigger(_ context.Context, ns, name string) error {
	key := objectKey(ns, name)
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.st.Triggers[key]
	if !ok {
		return notFound("trigger", ns, name)
	}
	delete(b.st.Triggers, key)
	if err := b.commitLocked(func() { b.st.Triggers[key] = r }); err != nil {
		return err
	}
	b.kickTrigger(key)
	b.kickFunction(objectKey(ns, r.Spec.Function))
	return nil
}

// --- jobs ---

func (b *Backend) ListJobs(_ context.Context, ns string) ([]api.Job, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	var out []api.Job
	for _, r := range b.st.Jobs {
		if r.Namespace == ns {
			out = append(out, jobOf(r))
		}
	}
	slices.SortFunc(out, func(a, b api.Job) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (b *Backend) GetJob(_ context.Context, ns, name string) (api.Job, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	r, ok := b.st.Jobs[objectKey(ns, name)]
	if !ok {
		return api.Job{}, notFound("job", ns, name)
	}
	return jobOf(r), nil
}

func (b *Backend) CreateJob(_ context.Context, ns, name string, spec api.JobSpec) (api.Job, error) {
	key := objectKey(ns, name)
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.st.Jobs[key]; ok {
		return api.Job{}, exists("job", ns, name)
	}
	r := &jobRecord{meta: newMeta(ns, name), Spec: cloneJobSpec(spec), Status: api.JobStatus{Phase: api.JobPending}}
	hadNS := b.st.Namespaces[ns]
	b.st.Jobs[key], b.st.Namespaces[ns] = r, true
	if err := b.commitLocked(func() { delete(b.st.Jobs, key); b.st.Namespaces[ns] = hadNS }); err != nil {
		return api.Job{}, err
	}
	b.kickJob(key)
	return jobOf(r), nil
}

func (b *Backend) UpdateJob(_ context.Context, ns, name string, mutate func(*api.JobSpec) error) (api.Job, error) {
	key := objectKey(ns, name)
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.st.Jobs[key]
	if !ok {
		return api.Job{}, notFound("job", ns, name)
	}
	spec := cloneJobSpec(r.Spec)
	if err := mutate(&spec); err != nil {
		return api.Job{}, err
	}
	if equalJSON(spec, r.Spec) {
		return jobOf(r), nil
	}
	old, oldGen := r.Spec, r.Generation
	r.Spec, r.Generation = spec, r.Generation+1
	if err := b.commitLocked(func() { r.Spec, r.Generation = old, oldGen }); err != nil {
		return api.Job{}, err
	}
	b.kickJob(key)
	return jobOf(r), nil
}

func (b *Backend) DeleteJob(_ context.Context, ns, name string) error {
	key := objectKey(ns, name)
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.st.Jobs[key]
	if !ok {
		return notFound("job", ns, name)
	}
	delete(b.st.Jobs, key)
	if err := b.commitLocked(func() { b.st.Jobs[key] = r }); err != nil {
		return err
	}
	b.kickJob(key)
	return nil
}

// --- helpers ---

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
