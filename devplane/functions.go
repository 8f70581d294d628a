package devplane

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/scaling/pool"
)

var tracer = otel.Tracer("sless.dev/sless/devplane")

// buildingAfter is how long a build may take before the function shows phase Building; a
// build found on disk (same content hash) returns well within it.
const buildingAfter = 200 * time.Millisecond

// maxBuildError caps the compiler output kept in status.last_build_error.
const maxBuildError = 16 << 10

// reconcileFunction brings one function to its declared state: build the uploaded source
// (or find the build by content hash), hand it to the pool, and write the status. Its
// triggers and jobs are reconciled after it, since they wait for it to be Ready.
func (b *Backend) reconcileFunction(key string) {
	ctx, span := tracer.Start(b.ctx, "local.reconcileFunction", withKey(key))
	defer span.End()
	defer b.kickDependents(key)
	b.mu.RLock()
	r, ok := b.st.Functions[key]
	var fn api.Function
	var gen int64
	if ok {
		fn, gen = functionOf(r), r.Generation
	}
	_, disabled := b.httpGateLocked(fn.Namespace, fn.Name)
	b.mu.RUnlock()
	if !ok {
		b.undeploy(key)
		b.deleteArtifacts(ctx, key)
		return
	}
	switch {
	case fn.Image != "":
		b.undeploy(key)
		b.setFunctionStatus(key, gen, func(st *api.FunctionStatus) {
			st.Phase, st.Message = api.PhaseFailed, "sless dev runs uploaded source only; prebuilt images (image) need the Kubernetes deployment: upload a zip instead"
		})
		return
	case fn.Source == nil:
		b.undeploy(key)
		b.setFunctionStatus(key, gen, func(st *api.FunctionStatus) {
			st.Phase, st.Message = api.PhasePending, "waiting for source: upload a zip to POST /v1/namespaces/"+fn.Namespace+"/functions/"+fn.Name+"/upload"
		})
		return
	}
	art, built, err := b.artifact(ctx, fn.Runtime, fn.Source, func() {
		b.setFunctionStatus(key, gen, func(st *api.FunctionStatus) {
			st.Phase, st.Message = api.PhaseBuilding, "building "+short(fn.Source.SHA256)
		})
	})
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		b.log.Warn("Warning: build failed", "function", key, "error", err)
		now := time.Now().UTC()
		b.setFunctionStatus(key, gen, func(st *api.FunctionStatus) {
			st.Phase, st.Message, st.LastBuildError, st.LastBuildTime = api.PhaseFailed, "build failed; see last_build_error", truncate(err.Error(), maxBuildError), &now
		})
		return // the previous build, if any, keeps serving, as a Deployment would
	}
	if err := b.deploy(key, fn, art, disabled); err != nil {
		b.setFunctionStatus(key, gen, func(st *api.FunctionStatus) { st.Phase, st.Message = api.PhaseFailed, err.Error() })
		return
	}
	b.setFunctionStatus(key, gen, func(st *api.FunctionStatus) {
		st.Phase, st.Message, st.URL, st.Image, st.LastBuildError = api.PhaseReady, "", b.functionURL(fn.Namespace, fn.Name), "local:"+short(art.Hash), ""
		if built || st.LastBuildTime == nil {
			now := time.Now().UTC()
			st.LastBuildTime = &now
		}
	})
}

// deploy hands the build to the pool under the function's routing host.
func (b *Backend) deploy(key string, fn api.Function, art *buildkit.Artifact, disabled bool) error {
	host := b.routingHost(fn.Namespace, fn.Name)
	spec := pool.Spec{
		Artifact: art, Env: fn.EnvVars, Timeout: time.Duration(fn.TimeoutSec) * time.Second,
		MinProcs: int(fn.MinReplicas), MaxProcs: int(fn.MaxReplicas), Target: int(fn.ScalingTarget),
		ScaleDown: time.Duration(fn.ScaleDownPeriodSec) * time.Second, Disabled: disabled,
	}
	if spec.ScaleDown <= 0 {
		spec.ScaleDown = 300 * time.Second
	}
	if err := b.pool.Set(host, spec); err != nil {
		return fmt.Errorf("starting function %s: %w", key, err)
	}
	b.mu.Lock()
	b.deployed[key] = deployment{host: host, spec: spec}
	b.mu.Unlock()
	return nil
}

// deployment is a function the pool serves: its routing host and how it runs (jobs of the
// function run the same build).
type deployment struct {
	host string
	spec pool.Spec
}

func (b *Backend) undeploy(key string) {
	b.mu.Lock()
	d, ok := b.deployed[key]
	delete(b.deployed, key)
	b.mu.Unlock()
	if ok {
		b.pool.Remove(d.host)
	}
}

// startFailedPrefix begins the status message of a function whose last cold start failed.
const startFailedPrefix = "the last start of the function process failed: "

// noteStart shows a failed cold start (e.g. a Python syntax error, which no build step
// catches) in the function's status message, and clears it once a start succeeds.
func (b *Backend) noteStart(host string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for key, d := range b.deployed {
		if d.host != host {
			continue
		}
		r := b.st.Functions[key]
		if r == nil || r.Status.Phase != api.PhaseReady {
			return
		}
		old := r.Status.Message
		switch {
		case err != nil:
			r.Status.Message = truncate(startFailedPrefix+err.Error(), maxBuildError)
		case strings.HasPrefix(old, startFailedPrefix):
			r.Status.Message = ""
		}
		if r.Status.Message == old {
			return
		}
		if err := b.commitLocked(func() { r.Status.Message = old }); err != nil {
			b.log.Error("persisting function status", "function", key, "error", err)
		}
		return
	}
}

// deleteArtifacts garbage-collects the uploads of a deleted function.
func (b *Backend) deleteArtifacts(ctx context.Context, key string) {
	ns, name := splitKey(key)
	if err := b.opts.Artifacts.DeleteFunction(ctx, ns, name); err != nil {
		b.log.Warn("Warning: uploads of a deleted function were not removed", "function", key, "error", err)
	}
}

// setFunctionStatus applies change to the status of generation gen and persists it; a status
// for a generation that is no longer current is still written (observed_generation says
// which one it describes).
func (b *Backend) setFunctionStatus(key string, gen int64, change func(*api.FunctionStatus)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.st.Functions[key]
	if !ok || r.Generation < gen {
		return
	}
	old, oldGen := r.Status, r.ObservedGeneration
	change(&r.Status)
	r.ObservedGeneration = gen
	if equalJSON(old, r.Status) && oldGen == gen {
		return
	}
	if err := b.commitLocked(func() { r.Status, r.ObservedGeneration = old, oldGen }); err != nil {
		b.log.Error("persisting function status", "function", key, "error", err)
	}
}

// kickDependents reconciles the triggers and jobs that reference function key.
func (b *Backend) kickDependents(key string) {
	ns, name := splitKey(key)
	b.mu.RLock()
	var triggers, jobs []string
	for k, t := range b.st.Triggers {
		if t.Namespace == ns && t.Spec.Function == name {
			triggers = append(triggers, k)
		}
	}
	for k, j := range b.st.Jobs {
		if j.Namespace == ns && j.Spec.Function == name {
			jobs = append(jobs, k)
		}
	}
	b.mu.RUnlock()
	for _, k := range triggers {
		b.kickTrigger(k)
	}
	for _, k := range jobs {
		b.kickJob(k)
	}
}

// builds caches local builds by content hash: the same source is built once, whichever
// function uploads it, and concurrent requests for one hash wait for the same build.
type builds struct {
	sem   chan struct{}
	mu    sync.Mutex
	locks map[string]*sync.Mutex
	done  map[string]*buildkit.Artifact
}

func newBuilds(n int) builds {
	return builds{sem: make(chan struct{}, n), locks: map[string]*sync.Mutex{}, done: map[string]*buildkit.Artifact{}}
}

func (bs *builds) lock(hash string) *sync.Mutex {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	l := bs.locks[hash]
	if l == nil {
		l = &sync.Mutex{}
		bs.locks[hash] = l
	}
	return l
}

// artifact returns the build of src, building it when no build of this content exists.
// starting is called before a real build begins; built reports whether one ran.
func (b *Backend) artifact(ctx context.Context, runtime string, src *api.Source, starting func()) (art *buildkit.Artifact, built bool, err error) {
	id := runtime + "-" + src.SHA256
	l := b.builds.lock(id)
	l.Lock()
	defer l.Unlock()
	b.builds.mu.Lock()
	art = b.builds.done[id]
	b.builds.mu.Unlock()
	if art != nil {
		return art, false, nil
	}
	ctx, span := tracer.Start(ctx, "local.build", withKey(src.ContextKey))
	defer span.End()
	data, err := b.readContext(ctx, src.ContextKey)
	if err != nil {
		return nil, false, err
	}
	dir := filepath.Join(b.opts.BuildDir, runtime+"-"+short(src.SHA256))
	select {
	case b.builds.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	unlock, err := lockFile(dir + ".lock")
	if err != nil {
		<-b.builds.sem
		return nil, false, err
	}
	type result struct {
		art *buildkit.Artifact
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer func() { unlock(); <-b.builds.sem }()
		art, err := b.opts.Builder.Build(ctx, data, runtime, dir)
		done <- result{art, err}
	}()
	var res result
	select {
	case res = <-done: // found on disk from an earlier run: no Building phase to show
	case <-time.After(buildingAfter):
		starting()
		built = true
		res = <-done
	}
	if res.err != nil {
		span.SetStatus(codes.Error, res.err.Error())
		return nil, built, res.err
	}
	art = res.art
	b.builds.mu.Lock()
	b.builds.done[id] = art
	b.builds.mu.Unlock()
	return art, built, nil
}

func (b *Backend) readContext(ctx context.Context, key string) ([]byte, error) {
	rc, err := b.opts.Artifacts.Store.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("reading build context %s: %w", key, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("reading build context %s: %w", key, err)
	}
	return data, nil
}

func splitKey(key string) (ns, name string) {
	ns, name, _ = strings.Cut(key, "/")
	return ns, name
}

func short(hash string) string { return hash[:min(len(hash), 12)] }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "\n… (truncated)"
}

func withKey(key string) trace.SpanStartOption {
	return trace.WithAttributes(attribute.String("sless.object", key))
}

// lockFile takes an exclusive flock on path, so data directories (and processes) sharing a
// build directory never build into the same place at once.
func lockFile(path string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("build directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("build lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("build lock %s: %w", path, err)
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}
