package devplane

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"sless.dev/sless/devplane/pool"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/history"
	"sless.dev/sless/rules"
)

// jobRuns are the runs in progress, by job key, so a deleted or re-run job stops its run.
type jobRuns struct {
	mu sync.Mutex
	m  map[string]context.CancelFunc
}

func (j *jobRuns) start(key string, cancel context.CancelFunc) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if old := j.m[key]; old != nil {
		old()
	}
	j.m[key] = cancel
}

func (j *jobRuns) stop(key string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if c := j.m[key]; c != nil {
		c()
		delete(j.m, key)
	}
}

const errInterrupted = "sless dev stopped while the job ran; raise run_id to run it again"

// interruptJobs marks runs that were in progress when sless dev stopped as failed: a job runs
// at most once per run_id.
func (b *Backend) interruptJobs() {
	for key, r := range b.store.snapshot().jobs {
		if r.Status.Phase != api.JobRunning {
			continue
		}
		err := setStatus(b, jobs, key, func(r *jobRecord) bool {
			r.Status.Phase, r.Status.Error = api.JobFailed, errInterrupted
			return true
		})
		if err != nil {
			b.log.Error("persisting job status", "job", key, "error", err)
		}
	}
}

// reconcileJob runs a job once per run_id: 0 is Skipped; a raised run_id runs it again once
// its function is Ready for its current generation (the rule the cluster follows).
func (b *Backend) reconcileJob(key string) error {
	_, span := tracer.Start(b.ctx, "devplane.reconcileJob", withKey(key))
	defer span.End()
	snap := b.store.snapshot()
	r, ok := snap.jobs[key]
	if !ok {
		b.jobs.stop(key)
		ns, name := splitKey(key)
		b.logs.remove(logKey(backend.LogJob, ns, name))
		return nil
	}
	spec, st := cloneJobSpec(r.Spec), r.Status
	fnKey := objectKey(r.Namespace, spec.Function)
	_, deployed := b.deployment(fnKey)
	fn, hasFn := snap.functions[fnKey]
	ready := hasFn && deployed && rules.FunctionReady(fn.Status.Phase == api.PhaseReady, fn.Generation, fn.ObservedGeneration)
	switch {
	case spec.RunID == 0:
		return b.setJobStatus(key, -1, func(s *api.JobStatus) { *s = api.JobStatus{Phase: api.JobSkipped} })
	case st.ObservedRunID == spec.RunID && st.Phase != api.JobPending && st.Phase != api.JobBuilding:
		return nil // this run_id has run or is running
	}
	if st.ObservedRunID != spec.RunID { // a new run: its log starts anew
		lk := logKey(backend.LogJob, r.Namespace, r.Name)
		b.logs.reset(lk)
		b.logs.append(lk, api.LogLine{Time: time.Now().UTC(), Instance: "run", Line: fmt.Sprintf("[sless] run %d", spec.RunID)})
	}
	switch {
	case spec.Function == "" && spec.Source != nil:
		return b.runSelfContained(key, r.Namespace, spec)
	case spec.Function == "":
		return b.setJobStatus(key, -1, func(s *api.JobStatus) {
			*s = api.JobStatus{Phase: api.JobFailed, ObservedRunID: spec.RunID,
				Error: "sless dev builds uploaded code only; a job with a prebuilt image needs the Kubernetes deployment: upload the job's code (POST .../jobs/{name}/upload) or set function"}
		})
	case !ready:
		return b.setJobStatus(key, -1, func(s *api.JobStatus) {
			*s = api.JobStatus{Phase: api.JobPending, ObservedRunID: spec.RunID, Error: fmt.Sprintf("waiting for function %q to be Ready", spec.Function)}
		})
	}
	run, _ := b.latestSpec(fnKey)
	return b.startJob(key, spec, run)
}

// runSelfContained builds the job's own uploaded code (cached by tenant and content hash
// like a function's) and runs it.
func (b *Backend) runSelfContained(key, ns string, spec api.JobSpec) error {
	art, _, err := b.artifact(b.ctx, ns, spec.Runtime, spec.Source, logKey(backend.LogJob, ns, jobName(key)), func() {
		_ = b.setJobStatus(key, -1, func(s *api.JobStatus) { *s = api.JobStatus{Phase: api.JobBuilding, ObservedRunID: spec.RunID} })
	})
	if err != nil {
		serr := b.setJobStatus(key, -1, func(s *api.JobStatus) {
			*s = api.JobStatus{Phase: api.JobFailed, ObservedRunID: spec.RunID, Error: truncate("build failed: "+err.Error(), maxBuildError)}
		})
		if retryable(err) {
			return err
		}
		return serr
	}
	return b.startJob(key, spec, pool.Spec{Artifact: art, Env: spec.EnvVars, Timeout: time.Duration(spec.TimeoutSec) * time.Second, MemoryMB: int(spec.MemoryMB)})
}

// startJob runs spec with run, the spec of its function's latest ready revision, whose
// Mask hides the function's secret values in the run's result, output and error.
func (b *Backend) startJob(key string, spec api.JobSpec, run pool.Spec) error {
	now := time.Now().UTC()
	if err := b.setJobStatus(key, -1, func(s *api.JobStatus) {
		*s = api.JobStatus{Phase: api.JobRunning, ObservedRunID: spec.RunID, StartTime: &now}
	}); err != nil {
		var v errVolatile
		if !errors.As(err, &v) {
			return err
		}
		// Running is shown even though it is not on disk; the run goes ahead.
	}
	ctx, cancel := context.WithCancel(b.ctx)
	b.jobs.start(key, cancel)
	ns, _ := splitKey(key)
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer cancel()
		res := b.pool.RunJob(ctx, "job/"+key, run, spec.Event)
		done := now.Add(res.Duration)
		fn := spec.Function
		if fn == "" {
			fn = jobName(key) // a self-contained job is its own function
		}
		rec := history.Record{Namespace: ns, Function: fn, Trigger: jobName(key), Kind: history.KindJob,
			Start: now, Duration: res.Duration, Status: history.StatusSucceeded, MemoryMB: int32(run.MemoryMB)}
		if res.Err != nil {
			rec.Status, rec.Error = history.StatusFailed, res.Err.Error()
		}
		b.opts.Recorder.Record(rec) // before the status: whoever sees Succeeded finds the record
		err := b.setJobStatus(key, spec.RunID, func(s *api.JobStatus) {
			s.Phase, s.CompletionTime, s.DurationMs = api.JobSucceeded, &done, res.Duration.Milliseconds()
			s.Result, s.Output = res.Result, res.Output
			if res.Err != nil {
				s.Phase, s.Error = api.JobFailed, res.Err.Error()
				if errors.Is(res.Err, context.Canceled) && b.ctx.Err() != nil {
					s.Error = errInterrupted
				}
			}
		})
		if err != nil {
			b.log.Error("persisting job status", "job", key, "error", err)
		}
		b.log.Info("job finished", "job", key, "runID", spec.RunID, "duration", res.Duration, "error", res.Err)
	}()
	return nil
}

func jobName(key string) string {
	_, name := splitKey(key)
	return name
}

// setJobStatus changes a job's status and persists it; runID >= 0 applies the change only
// while the job still observes that run (a re-run or delete makes an old run's result moot).
func (b *Backend) setJobStatus(key string, runID int64, change func(*api.JobStatus)) error {
	return setStatus(b, jobs, key, func(r *jobRecord) bool {
		if runID >= 0 && (r.Status.ObservedRunID != runID || r.Spec.RunID != runID) {
			return false
		}
		change(&r.Status)
		r.ObservedGeneration = r.Generation
		return true
	})
}
