package devplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/singleflight"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/devplane/pool"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/rules"
)

var tracer = otel.Tracer("sless.dev/sless/devplane")

// buildingAfter is how long a build may take before the function shows phase Building; a
// build found on disk (same content hash) returns well within it.
const buildingAfter = 200 * time.Millisecond

// maxBuildError caps the compiler output kept in status.last_build_error.
const maxBuildError = 16 << 10

// reconcileFunction brings one function to its declared state: build the uploaded source
// (or find the build by content hash), hand it to the pool, and write the status. Its
// triggers and jobs are reconciled after it, since they wait for it to be Ready. An error
// means "retry later" (a full disk, an unreadable upload); a user's mistake is a status.
func (b *Backend) reconcileFunction(key string) error {
	ctx, span := tracer.Start(b.ctx, "devplane.reconcileFunction", withKey(key))
	defer span.End()
	defer b.kickDependents(key)
	snap := b.store.snapshot()
	r, ok := snap.functions[key]
	if !ok {
		b.undeploy(key)
		b.dropAsync(key)
		b.deleteArtifacts(ctx, key)
		ns, name := splitKey(key)
		b.logs.remove(logKey(backend.LogFunction, ns, name))
		b.logs.remove(logKey(backend.LogBuild, ns, name))
		return nil
	}
	fn, gen := functionOf(r), r.Generation
	gate := httpGates(snap)[key]
	switch {
	case fn.Image != "":
		b.undeploy(key)
		return b.setSteps(key, gen, nil, rules.Step{Name: rules.StepBuilt, State: rules.StepFailed, Reason: "ImageNotSupported",
			Message: "sless dev runs uploaded source only; prebuilt images (image) need the Kubernetes deployment: upload a zip instead"})
	case fn.Source == nil:
		b.undeploy(key)
		return b.setSteps(key, gen, nil, rules.Step{Name: rules.StepBuilt, State: rules.StepWaiting, Reason: "AwaitingSource",
			Message: "waiting for source: upload a zip to POST /v1/namespaces/" + fn.Namespace + "/functions/" + fn.Name + "/upload"})
	}
	rev, err := b.currentRevision(key)
	if err != nil {
		return err
	}
	settle := func() error { return b.settleRevisions(ctx, key, gate.Disabled) }
	art, built, err := b.artifact(ctx, fn.Namespace, rev.Config.Runtime, rev.Config.Source, logKey(backend.LogBuild, fn.Namespace, fn.Name), func() {
		_ = b.setSteps(key, gen, nil, rules.Step{Name: rules.StepBuilt, State: rules.StepBuilding, Reason: "Building", Message: "building " + short(rev.Config.Source.SHA256)})
	})
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		b.log.Warn("Warning: build failed", "function", key, "revision", rev.Name, "error", err)
		now := time.Now().UTC()
		failed := rules.Step{Name: rules.StepBuilt, State: rules.StepFailed, Reason: "BuildFailed", Message: "build failed; see last_build_error"}
		if retryable(err) {
			failed.Reason, failed.Message = "BuildError", "build failed for a reason outside the source (see last_build_error); retrying"
		} else if merr := b.settleRevision(key, rev.Name, rules.Build{State: rules.BuildFailed, Message: "build failed: " + firstLine(err.Error())}); merr != nil {
			return merr
		}
		serr := b.setSteps(key, gen, func(st *api.FunctionStatus) {
			st.LastBuildError, st.LastBuildTime = truncate(err.Error(), maxBuildError), &now
		}, failed)
		// The revisions that serve keep serving, as a Deployment's old pods do.
		if retryable(err) {
			return errors.Join(err, settle())
		}
		return errors.Join(serr, settle())
	}
	if err := b.startRevision(key, fn, rev, art, gate.Disabled); err != nil {
		step := rules.Step{Name: rules.StepDeployed, State: rules.StepFailed, Reason: "DeployFailed", Message: err.Error()}
		var missing *missingSecretError
		switch {
		case errors.As(err, &missing):
			// Retried when the secret appears (a secret's change reconciles its functions).
			step.Reason = "SecretNotFound"
			return errors.Join(b.setSteps(key, gen, nil, done(rules.StepBuilt), step), settle())
		case errors.Is(err, pool.ErrFilesNeedSandbox):
			step.Reason = "SandboxRequired"
			if merr := b.settleRevision(key, rev.Name, rules.Build{State: rules.BuildFailed, Message: err.Error()}); merr != nil {
				return merr
			}
			return errors.Join(b.setSteps(key, gen, nil, done(rules.StepBuilt), step), settle())
		}
		_ = b.setSteps(key, gen, nil, done(rules.StepBuilt), step)
		return errors.Join(err, settle())
	}
	if err := b.settleRevision(key, rev.Name, rules.Build{State: rules.BuildSucceeded, Image: "local:" + short(art.Hash)}); err != nil {
		return err
	}
	if err := settle(); err != nil {
		return err
	}
	b.setAsyncRunner(key, fn, b.routingHost(fn.Namespace, fn.Name))
	return b.setSteps(key, gen, func(st *api.FunctionStatus) {
		st.URL, st.Image, st.LastBuildError = b.functionURL(fn.Namespace, fn.Name), "local:"+short(art.Hash), ""
		if built || st.LastBuildTime == nil {
			now := time.Now().UTC()
			st.LastBuildTime = &now
		}
	}, done(rules.StepBuilt), done(rules.StepDeployed), done(rules.StepHealthy))
}

// firstLine is the first line of a build error, for a revision's message (the whole
// output is in last_build_error).
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return truncate(line, 200)
}

// retryable reports a build failure that is not the source's fault: anything but the
// compiler's or installer's own error, and a full disk even when a tool reports it.
func retryable(err error) bool {
	var be *buildkit.BuildError
	return !errors.As(err, &be) || errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), "no space left on device")
}

// deployment is a function in the pool: the host its triggers and asynchronous calls use
// (revisionRouter picks a revision per call) and its revisions that run, by name.
type deployment struct {
	host      string
	revisions map[string]running
	// retired are values its revisions ran with before a rotation or their removal.
	retired []retiredValues
	// mask hides the values of its revisions' secrets, and the retired ones, in what they
	// answer (what they print the pool masks with each process's own values).
	mask *rules.SecretMasker
}

// deployment is what runs of function key; ok while a revision of it serves.
func (b *Backend) deployment(key string) (deployment, bool) {
	b.depMu.Lock()
	defer b.depMu.Unlock()
	d := b.deployed[key]
	return d, len(d.revisions) > 0
}

// latestSpec is how the function's latest ready revision runs (a job of the function runs
// that build), and whether one does.
func (b *Backend) latestSpec(key string) (pool.Spec, bool) {
	r, ok := b.store.snapshot().functions[key]
	if !ok {
		return pool.Spec{}, false
	}
	d, _ := b.deployment(key)
	run, ok := d.revisions[r.Status.LatestReadyRevision]
	return run.spec, ok
}

// undeploy takes every revision of function key out of the pool.
func (b *Backend) undeploy(key string) {
	ns, _ := splitKey(key)
	b.depMu.Lock()
	d := b.deployed[key]
	delete(b.deployed, key)
	b.depMu.Unlock()
	b.runners.set(b.ctx, asyncRunnerKey(key), nil, nil)
	for name := range d.revisions {
		b.pool.Remove(rules.RevisionHost(ns, name, b.opts.Domain))
	}
	if len(d.revisions) > 0 {
		b.rebuildRoutes()
	}
}

// startFailedPrefix begins the status message of a function whose last cold start failed.
const startFailedPrefix = "the last start of the function process failed: "

// noteStart shows a failed cold start (e.g. a Python import error, which no build step
// catches) in the function's status message, and clears it once a start succeeds.
func (b *Backend) noteStart(host string, err error) {
	key, _, ok := b.keyOfHost(host)
	if !ok {
		return
	}
	werr := setStatus(b, functions, key, func(r *functionRecord) bool {
		if r.Status.Phase != api.PhaseReady {
			return false
		}
		switch {
		case err != nil:
			r.Status.Message = truncate(startFailedPrefix+err.Error(), maxBuildError)
		case strings.HasPrefix(r.Status.Message, startFailedPrefix):
			r.Status.Message = ""
		}
		return true
	})
	if werr != nil {
		b.log.Error("persisting function status", "function", key, "error", werr)
	}
}

// deleteArtifacts garbage-collects the uploads of a deleted function.
func (b *Backend) deleteArtifacts(ctx context.Context, key string) {
	ns, name := splitKey(key)
	if err := b.opts.Artifacts.DeleteFunction(ctx, ns, name); err != nil {
		b.log.Warn("Warning: uploads of a deleted function were not removed", "function", key, "error", err)
	}
}

// setStatus changes the status of the record at key; change returns false to leave it. A
// status that could not be persisted is still shown (it describes what runs now) and its
// error returned, so the reconcile is retried.
func setStatus[S, T any](b *Backend, t table[S, T], key string, change func(*record[S, T]) bool) error {
	return b.store.write(true, func(tx *txn) error {
		old, ok := (*t.of(tx.next))[key]
		if !ok {
			return nil
		}
		r := t.copyRecord(old)
		if !change(r) || (equalJSON(r.Status, old.Status) && r.ObservedGeneration == old.ObservedGeneration) {
			return nil
		}
		return put(tx, b.store.root, t, key, r)
	})
}

// setFunctionStatus applies change to the status of generation gen; a status for a
// generation that is no longer current is still written (observed_generation says which
// one it describes), one for an older generation than the status's is not.
// setSteps writes a function's phase and message as the cluster derives them from its
// conditions (rules.DeriveReadiness over the same steps), then the rest of its status (more).
func (b *Backend) setSteps(key string, gen int64, more func(*api.FunctionStatus), steps ...rules.Step) error {
	return b.setFunctionStatus(key, gen, func(st *api.FunctionStatus) {
		markSteps(st, steps...)
		if more != nil {
			more(st)
		}
	})
}

// markSteps sets the phase and message of st from the function's steps.
func markSteps(st *api.FunctionStatus, steps ...rules.Step) {
	r := rules.DeriveReadiness(steps...)
	st.Phase, st.Message = r.Phase, r.Blocking.Message
}

func done(step string) rules.Step { return rules.Step{Name: step, State: rules.StepDone} }

func (b *Backend) setFunctionStatus(key string, gen int64, change func(*api.FunctionStatus)) error {
	return setStatus(b, functions, key, func(r *functionRecord) bool {
		if r.Generation < gen {
			return false
		}
		change(&r.Status.FunctionStatus)
		r.ObservedGeneration = gen
		return true
	})
}

// kickDependents reconciles the triggers and jobs that reference function key.
func (b *Backend) kickDependents(key string) {
	ns, name := splitKey(key)
	snap := b.store.snapshot()
	for k, t := range snap.triggers {
		if t.Namespace == ns && t.Spec.Function == name {
			b.kickTrigger(k)
		}
	}
	for k, j := range snap.jobs {
		if j.Namespace == ns && j.Spec.Function == name {
			b.kickJob(k)
		}
	}
}

// builds caches local builds by tenant and content hash: a tenant's same source is built
// once, concurrent requests share one build (singleflight), and no tenant ever runs a
// build another tenant's code could have written.
type builds struct {
	sem   chan struct{}
	group singleflight.Group
	done  sync.Map // build directory → *buildkit.Artifact
}

func newBuilds(n int) builds { return builds{sem: make(chan struct{}, n)} }

// artifact returns ns's build of src, building it when no build of this content exists,
// with the build's output in the log logKey. starting is called when the build takes long
// enough to show; built reports that.
func (b *Backend) artifact(ctx context.Context, ns, runtime string, src *api.Source, logKey string, starting func()) (art *buildkit.Artifact, built bool, err error) {
	dir := filepath.Join(b.opts.BuildDir, ns, runtime+"-"+short(src.SHA256))
	if art, ok := b.builds.done.Load(dir); ok {
		return art.(*buildkit.Artifact), false, nil
	}
	ch := b.builds.group.DoChan(dir, func() (any, error) { return b.build(ctx, ns, runtime, src, dir, logKey) })
	var res singleflight.Result
	select {
	case res = <-ch: // found on disk from an earlier run: no Building phase to show
	case <-time.After(buildingAfter):
		starting()
		built = true
		res = <-ch
	}
	if res.Err != nil {
		return nil, built, res.Err
	}
	art = res.Val.(*buildkit.Artifact)
	b.builds.done.Store(dir, art)
	return art, built, nil
}

// build runs one build into dir under the concurrency cap; a file lock keeps data
// directories that share a build directory from building into the same place at once.
func (b *Backend) build(ctx context.Context, ns, runtime string, src *api.Source, dir, logKey string) (*buildkit.Artifact, error) {
	ctx, span := tracer.Start(ctx, "devplane.build", withKey(src.ContextKey))
	defer span.End()
	ctx, cancel := context.WithTimeout(ctx, b.opts.BuildTimeout)
	defer cancel()
	data, err := b.readContext(ctx, src.ContextKey)
	if err != nil {
		return nil, err
	}
	select {
	case b.builds.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-b.builds.sem }()
	unlock, err := flock(dir+".lock", true)
	if err != nil {
		return nil, fmt.Errorf("build lock %s: %w", dir, err)
	}
	defer unlock()
	b.logs.reset(logKey)
	var mask *rules.SecretMasker
	if fnKey, ok := strings.CutPrefix(logKey, string(backend.LogBuild)+"/"); ok {
		mask = b.maskOf(fnKey)
	}
	out := &buildLog{b: b, key: logKey, mask: mask}
	fmt.Fprintf(out, "[sless] building %s source %s\n", runtime, short(src.SHA256))
	builder := b.opts.Builder
	builder.Output, builder.Tenant = out, ns
	if err := b.warmGo(ctx, runtime); err != nil {
		span.SetStatus(codes.Error, err.Error())
		return nil, err
	}
	art, err := builder.Build(ctx, data, runtime, dir)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("the build did not finish within %s: %w", b.opts.BuildTimeout, err)
	}
	if err != nil {
		logged := mask.Mask(withoutOutput(err))
		err = maskError(err, mask) // it goes on to the status, the log and spans
		span.SetStatus(codes.Error, err.Error())
		fmt.Fprintf(out, "[sless] build failed: %s\n", logged)
	} else {
		fmt.Fprintln(out, "[sless] build done")
	}
	return art, err
}

// withoutOutput is err's text without a failed build step's output, for the build log: the
// step wrote it there as it ran.
func withoutOutput(err error) string {
	if be, ok := errors.AsType[*buildkit.BuildError](err); ok && be.Output != "" {
		return strings.Replace(err.Error(), be.Error(), be.Summary(), 1)
	}
	return err.Error()
}

// maskedError is an error whose text has secret values masked; errors.As and errors.Is
// still reach the error it masks.
type maskedError struct {
	err  error
	text string
}

func (e *maskedError) Error() string { return e.text }
func (e *maskedError) Unwrap() error { return e.err }

// maskError masks err's text (err itself when nothing in it is masked).
func maskError(err error, mask *rules.SecretMasker) error {
	if text := mask.Mask(err.Error()); text != err.Error() {
		return &maskedError{err: err, text: text}
	}
	return err
}

// warmGo fills the shared Go build cache sandboxed Go builds lay under their own, once per
// machine and Go version, before the first of them.
func (b *Backend) warmGo(ctx context.Context, runtime string) error {
	rt, err := buildkit.LookupRuntime(runtime)
	if err != nil || rt.Language != buildkit.LanguageGo || b.opts.Builder.Sandbox == nil {
		return nil
	}
	_, err, _ = b.builds.group.Do("warm-go", func() (any, error) { return nil, WarmSharedCache(ctx, b.opts.SharedCacheDir) })
	return err
}

// DefaultSharedCacheDir is Options.SharedCacheDir's default.
const DefaultSharedCacheDir = "/var/cache/sless"

// WarmSharedCache fills dir, an Options.SharedCacheDir, with what sandboxed builds lay under
// their own caches; it returns at once when a process of this machine did it already.
func WarmSharedCache(ctx context.Context, dir string) error {
	return buildkit.WarmGoCache(ctx, filepath.Join(dir, buildkit.GoBuildCache))
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
