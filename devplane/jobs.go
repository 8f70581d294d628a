package devplane

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/history"
	"sless.dev/sless/scaling/pool"
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
	b.mu.Lock()
	defer b.mu.Unlock()
	for key, r := range b.st.Jobs {
		if r.Status.Phase != api.JobRunning {
			continue
		}
		r.Status.Phase = api.JobFailed
		r.Status.Error = errInterrupted
		if err := b.commitLocked(func() {}); err != nil {
			b.log.Error("persisting job status", "job", key, "error", err)
		}
	}
}

// reconcileJob runs a job once per run_id: 0 is Skipped; a raised run_id runs it again once
// its function is Ready.
func (b *Backend) reconcileJob(key string) {
	_, span := tracer.Start(b.ctx, "local.reconcileJob", withKey(key))
	defer span.End()
	b.mu.RLock()
	r, ok := b.st.Jobs[key]
	var spec api.JobSpec
	var st api.JobStatus
	var dep deployment
	var deployed bool
	if ok {
		spec, st = cloneJobSpec(r.Spec), r.Status
		dep, deployed = b.deployed[objectKey(r.Namespace, spec.Function)]
	}
	b.mu.RUnlock()
	switch {
	case !ok:
		b.jobs.stop(key)
	case spec.RunID == 0:
		b.setJobStatus(key, -1, func(s *api.JobStatus) { *s = api.JobStatus{Phase: api.JobSkipped} })
	case st.ObservedRunID == spec.RunID && st.Phase != api.JobPending && st.Phase != api.JobBuilding:
		// this run_id has run or is running
	case spec.Function == "" && spec.Source != nil:
		b.runSelfContained(key, spec)
	case spec.Function == "":
		b.setJobStatus(key, -1, func(s *api.JobStatus) {
			*s = api.JobStatus{Phase: api.JobFailed, ObservedRunID: spec.RunID,
				Error: "sless dev builds uploaded code only; a job with a prebuilt image needs the Kubernetes deployment: upload the job's code (POST .../jobs/{name}/upload) or set function"}
		})
	case !deployed:
		b.setJobStatus(key, -1, func(s *api.JobStatus) {
			*s = api.JobStatus{Phase: api.JobPending, ObservedRunID: spec.RunID, Error: fmt.Sprintf("waiting for function %q to be Ready", spec.Function)}
		})
	default:
		b.startJob(key, spec, dep.spec)
	}
}

// runSelfContained builds the job's own uploaded code (cached by content hash like a
// function's) and runs it.
func (b *Backend) runSelfContained(key string, spec api.JobSpec) {
	art, _, err := b.artifact(b.ctx, spec.Runtime, spec.Source, func() {
		b.setJobStatus(key, -1, func(s *api.JobStatus) { *s = api.JobStatus{Phase: api.JobBuilding, ObservedRunID: spec.RunID} })
	})
	if err != nil {
		b.setJobStatus(key, -1, func(s *api.JobStatus) {
			*s = api.JobStatus{Phase: api.JobFailed, ObservedRunID: spec.RunID, Error: truncate("build failed: "+err.Error(), maxBuildError)}
		})
		return
	}
	b.startJob(key, spec, pool.Spec{Artifact: art, Env: spec.EnvVars, Timeout: time.Duration(spec.TimeoutSec) * time.Second})
}

func (b *Backend) startJob(key string, spec api.JobSpec, run pool.Spec) {
	now := time.Now().UTC()
	b.setJobStatus(key, -1, func(s *api.JobStatus) {
		*s = api.JobStatus{Phase: api.JobRunning, ObservedRunID: spec.RunID, StartTime: &now}
	})
	ctx, cancel := context.WithCancel(b.ctx)
	b.jobs.start(key, cancel)
	ns, _ := splitKey(key)
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer cancel()
		res := b.pool.RunJob(ctx, run, spec.Event)
		done := now.Add(res.Duration)
		fn := spec.Function
		if fn == "" {
			fn = jobName(key) // a self-contained job is its own function
		}
		rec := history.Record{Namespace: ns, Function: fn, Trigger: jobName(key), Kind: history.KindJob,
			Start: now, Duration: res.Duration, Status: history.StatusSucceeded}
		if res.Err != nil {
			rec.Status, rec.Error = history.StatusFailed, res.Err.Error()
		}
		b.opts.Recorder.Record(rec) // before the status: whoever sees Succeeded finds the record
		b.setJobStatus(key, spec.RunID, func(s *api.JobStatus) {
			s.Phase, s.CompletionTime, s.DurationMs = api.JobSucceeded, &done, res.Duration.Milliseconds()
			s.Result, s.Output = res.Result, res.Output
			if res.Err != nil {
				s.Phase, s.Error = api.JobFailed, res.Err.Error()
				if errors.Is(res.Err, context.Canceled) && b.ctx.Err() != nil {
					s.Error = errInterrupted
				}
			}
		})
		b.log.Info("job finished", "job", key, "runID", spec.RunID, "duration", res.Duration, "error", res.Err)
	}()
}

func jobName(key string) string {
	_, name := splitKey(key)
	return name
}

// setJobStatus changes a job's status and persists it; runID >= 0 applies the change only
// while the job still observes that run (a re-run or delete makes an old run's result moot).
func (b *Backend) setJobStatus(key string, runID int64, change func(*api.JobStatus)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.st.Jobs[key]
	if !ok || (runID >= 0 && (r.Status.ObservedRunID != runID || r.Spec.RunID != runID)) {
		return
	}
	old := r.Status
	change(&r.Status)
	if equalJSON(old, r.Status) {
		return
	}
	if err := b.commitLocked(func() { r.Status = old }); err != nil {
		b.log.Error("persisting job status", "job", key, "error", err)
	}
}
