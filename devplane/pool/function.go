package pool

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// function is the set of processes of one function. All fields are guarded by mu; changed is
// closed (and replaced) whenever a waiting request may now proceed.
type function struct {
	pool *Pool
	key  string

	mu       sync.Mutex
	spec     Spec
	procs    []*process
	changed  chan struct{}
	waiting  int   // requests inside acquire
	failures int   // cold starts that failed, ever; waiters compare against their start
	lastErr  error // why the last cold start failed
	removed  bool
	// output caps the lines of all its processes together (not guarded by mu).
	output *outputLimit
	// sb is the sandbox its processes run in (shared with the function's other revisions);
	// nil when not sandboxed.
	sb *sandbox
}

func newFunction(p *Pool, key string, sb *sandbox) *function {
	return &function{pool: p, key: key, sb: sb, changed: make(chan struct{}), output: newOutputLimit(p.opts)}
}

// broadcast wakes every waiter; call with mu held.
func (f *function) broadcast() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *function) setSpec(spec Spec) {
	f.mu.Lock()
	defer f.mu.Unlock()
	replace := f.spec.Artifact == nil || !sameRun(f.spec, spec)
	f.spec = spec
	if replace || spec.Disabled {
		for _, pr := range f.procs {
			f.stopLocked(pr)
		}
	}
	f.ensureMinLocked()
	f.broadcast()
}

// sameRun reports whether processes started for a can serve b unchanged.
func sameRun(a, b Spec) bool {
	return a.Artifact.Hash == b.Artifact.Hash && a.Artifact.Dir == b.Artifact.Dir &&
		slices.Equal(a.Artifact.Command, b.Artifact.Command) && maps.Equal(a.Env, b.Env) && a.Timeout == b.Timeout && a.MemoryMB == b.MemoryMB &&
		maps.EqualFunc(a.Files, b.Files, func(x, y map[string][]byte) bool { return maps.EqualFunc(x, y, bytes.Equal) })
}

func (f *function) remove() {
	f.mu.Lock()
	f.removed = true
	procs := slices.Clone(f.procs)
	for _, pr := range procs {
		f.stopLocked(pr)
	}
	f.broadcast()
	f.mu.Unlock()
	for _, pr := range procs {
		<-pr.exited
	}
	f.pool.release(f.sb)
}

// acquire returns a ready process with a request slot taken, starting processes as the load
// requires and holding the caller through a cold start. cold reports whether the caller
// waited for a process to start.
func (f *function) acquire(ctx context.Context) (pr *process, cold bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	base := f.failures
	f.waiting++
	defer func() { f.waiting-- }()
	for {
		switch {
		case f.removed:
			return nil, cold, fmt.Errorf("%w: %s", ErrUnknown, f.key)
		case f.spec.Disabled:
			return nil, cold, fmt.Errorf("%w: %s", ErrDisabled, f.key)
		case f.failures-base >= 2:
			return nil, cold, &StartError{Function: f.key, Err: f.lastErr}
		}
		best, live, starting := f.census()
		if best != nil && (best.inflight < f.spec.Target || live >= f.spec.MaxProcs) {
			best.inflight++
			best.lastUsed = time.Now()
			return best, cold, nil
		}
		if live < f.spec.MaxProcs && starting*f.spec.Target < f.waiting {
			f.startLocked()
		}
		cold = cold || best == nil
		wait := f.changed
		f.mu.Unlock()
		select {
		case <-wait:
			f.mu.Lock()
		case <-ctx.Done():
			f.mu.Lock()
			return nil, cold, context.Cause(ctx)
		}
	}
}

// census finds the least loaded ready process and counts live (not stopping) and starting
// processes.
func (f *function) census() (best *process, live, starting int) {
	for _, pr := range f.procs {
		if pr.stopping || pr.dead {
			continue
		}
		live++
		if !pr.ready {
			starting++
			continue
		}
		if best == nil || pr.inflight < best.inflight {
			best = pr
		}
	}
	return best, live, starting
}

// reapIfDead takes pr out of service at once when it exits within wait (a request on it just
// failed), instead of when its exit is processed.
func (f *function) reapIfDead(pr *process, wait time.Duration) {
	select {
	case <-pr.exited:
	case <-time.After(wait):
		return
	}
	f.retire(pr)
}

// retire takes pr out of service at once when it serves requests: it is exiting or about to
// be killed. Its exit is processed (and it leaves the set) only once its output has drained,
// up to pipeDrain later, and no request may be sent to it meanwhile. A process still starting
// serves none and keeps counting as starting until then, so a failed start is counted before
// another is tried.
func (f *function) retire(pr *process) {
	f.mu.Lock()
	if pr.ready {
		pr.dead = true
		f.broadcast()
	}
	f.mu.Unlock()
}

func (f *function) release(pr *process) {
	f.mu.Lock()
	pr.inflight--
	pr.lastUsed = time.Now()
	if f.waiting > 0 { // the hot path: nobody waits, nothing to wake
		f.broadcast()
	}
	f.mu.Unlock()
}

// tick stops processes idle for the scale-down period (keeping MinProcs) and replaces
// missing warm processes.
func (f *function) tick(now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.removed {
		return
	}
	_, live, _ := f.census()
	for _, pr := range f.procs {
		if live <= f.spec.MinProcs {
			break
		}
		if pr.ready && !pr.stopping && pr.inflight == 0 && now.Sub(pr.lastUsed) >= f.spec.ScaleDown {
			f.pool.log.Info("scaling down idle process", "function", f.key, "pid", pr.pid(), "idle", now.Sub(pr.lastUsed).Round(time.Millisecond))
			f.stopLocked(pr)
			live--
		}
	}
	f.ensureMinLocked()
}

func (f *function) ensureMinLocked() {
	if f.removed || f.spec.Disabled || f.spec.Artifact == nil {
		return
	}
	_, live, _ := f.census()
	for ; live < f.spec.MinProcs; live++ {
		f.startLocked()
	}
}

// startLocked launches a process; it becomes ready (or fails) asynchronously.
func (f *function) startLocked() {
	pr := newProcess(f, f.spec, f.pool.log.With("function", f.key))
	f.procs = append(f.procs, pr)
	go f.run(pr)
}

// run starts pr, waits for its health check and then for its exit, updating the set.
func (f *function) run(pr *process) {
	log := f.pool.log.With("function", f.key)
	err := pr.start()
	if err == nil {
		err = pr.waitHealthy(f.pool.opts.StartTimeout)
	}
	f.mu.Lock()
	stopped := pr.stopping // stopped on purpose while starting: nothing to report
	if err == nil && !stopped {
		pr.ready, pr.lastUsed = true, time.Now()
		log.Info("process ready", "pid", pr.pid(), "addr", pr.addr, "startup", time.Since(pr.started).Round(time.Millisecond))
		f.broadcast()
	}
	if err != nil && !stopped {
		f.failures++
		f.lastErr = err
		log.Warn("Warning: function process failed to start", "error", err)
		f.stopLocked(pr)
		f.broadcast()
	}
	f.mu.Unlock()
	if on := f.pool.opts.OnStart; on != nil && !stopped {
		on(f.key, err)
	}
	exitErr := pr.wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	if i := slices.Index(f.procs, pr); i >= 0 {
		f.procs = slices.Delete(f.procs, i, i+1)
	}
	if pr.ready && !pr.stopping {
		log.Warn("Warning: function process crashed; it is replaced on the next request", "pid", pr.pid(), "error", exitErr, "output", pr.tail.String())
	}
	f.ensureMinLocked()
	f.broadcast()
}

// stopLocked asks pr to stop; it leaves the set once it has exited.
func (f *function) stopLocked(pr *process) {
	if pr.stopping {
		return
	}
	pr.stopping = true
	go pr.stop(f.pool.opts.StopGrace)
}

func (f *function) stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	var s Stats
	for _, pr := range f.procs {
		s.Processes++
		if pr.ready && !pr.stopping && !pr.dead {
			s.Ready++
			s.Addrs = append(s.Addrs, pr.addr)
		}
		s.InFlight += pr.inflight
		if pid := pr.pid(); pid > 0 {
			s.PIDs = append(s.PIDs, pid)
		}
	}
	return s
}
