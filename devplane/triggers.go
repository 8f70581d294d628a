package devplane

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"sless.dev/sless/dispatcher"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
	triggerkinds "sless.dev/sless/triggers"
	"sless.dev/sless/triggers/kind"
)

// triggerRun is everything a running trigger depends on; a change to any of it restarts the
// runner.
type triggerRun struct {
	Runner   kind.Runner // what its kind runs, with everything the kind runs it with
	Host     string
	Timeout  time.Duration
	MemoryMB int32 // the function's, its invocations' records carry it
}

type runner struct {
	cfg    any
	cancel context.CancelFunc
	done   chan struct{}
}

// runners are the goroutines firing triggers (and asynchronous invocations), one per
// active trigger.
type runners struct {
	mu sync.Mutex
	m  map[string]*runner
}

// set makes key run cfg (nil: nothing), restarting it when cfg changed; cfg is comparable
// and holds everything run runs with.
func (rs *runners) set(parent context.Context, key string, cfg any, run func(ctx context.Context)) {
	rs.mu.Lock()
	old := rs.m[key]
	if old != nil && cfg != nil && old.cfg == cfg {
		rs.mu.Unlock()
		return
	}
	delete(rs.m, key)
	var (
		r   *runner
		ctx context.Context
	)
	if cfg != nil && parent.Err() == nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(parent)
		r = &runner{cfg: cfg, cancel: cancel, done: make(chan struct{})}
		rs.m[key] = r
	}
	rs.mu.Unlock()
	if old != nil {
		old.cancel()
		<-old.done
	}
	if r != nil {
		go func() {
			defer close(r.done)
			run(ctx)
		}()
	}
}

func (rs *runners) stopAll() {
	rs.mu.Lock()
	all := rs.m
	rs.m = map[string]*runner{}
	rs.mu.Unlock()
	for _, r := range all {
		r.cancel()
		<-r.done
	}
}

// reconcileTrigger starts, restarts or stops the trigger's runner and writes its status.
func (b *Backend) reconcileTrigger(key string) error {
	_, span := tracer.Start(b.ctx, "devplane.reconcileTrigger", withKey(key))
	defer span.End()
	snap := b.store.snapshot()
	r, ok := snap.triggers[key]
	if !ok {
		b.runners.set(b.ctx, key, nil, nil)
		return nil
	}
	spec, gen := r.Spec, r.Generation
	fnKey := objectKey(r.Namespace, spec.Function)
	dep, _ := b.deployment(fnKey)
	var timeoutSec, memoryMB int32
	if fn := snap.functions[fnKey]; fn != nil {
		timeoutSec, memoryMB = fn.Spec.TimeoutSec, fn.Spec.MemoryMB
	}
	timeout := rules.InvocationDeadline(timeoutSec)
	ns, name := splitKey(key)
	k, _ := triggerkinds.Lookup(spec.Type)
	var (
		run     kind.Runner
		problem string
	)
	if l, ok := k.(kind.Local); ok {
		run, problem = l.LocalRunner(spec, kind.LocalConfig{Secret: b.secretOf(ns), AMQPURL: b.opts.AMQPURL})
	}
	active, msg := triggerState(spec, dep.host, problem)
	var cfg any
	if active && run != nil {
		cfg = triggerRun{Runner: run, Host: dep.host, Timeout: timeout, MemoryMB: memoryMB}
	}
	b.runners.set(b.ctx, key, cfg, func(ctx context.Context) {
		env := kind.Env{Key: key, Trigger: name, Function: dispatcher.FunctionRef{Namespace: ns, Name: spec.Function, MemoryMB: memoryMB},
			Host: dep.host, Client: &http.Client{Transport: revisionRouter{b}}, Timeout: timeout,
			Invoker: b.invoker(dep.host), Recorder: b.opts.Recorder, Logger: b.log,
			Note: func(change func(*api.TriggerStatus)) { b.noteTrigger(key, change) }}
		if err := run.Run(ctx, env); err != nil && ctx.Err() == nil {
			b.log.Error("trigger stopped", "trigger", key, "error", err)
			b.noteTrigger(key, func(st *api.TriggerStatus) { st.Active, st.Message = false, err.Error() })
		}
	})
	return b.setTriggerStatus(key, gen, func(st *api.TriggerStatus) {
		st.Active, st.Message, st.URL = active, msg, ""
		if k != nil && k.Routes() {
			st.URL = b.functionURL(ns, spec.Function)
		}
	})
}

// secretOf reads the tenant's secrets for a trigger's kind (kind.LocalConfig.Secret).
func (b *Backend) secretOf(ns string) func(name, key string) ([]byte, bool, error) {
	return func(name, key string) ([]byte, bool, error) {
		if _, ok := b.secrets.get(objectKey(ns, name)); !ok {
			return nil, false, nil
		}
		v, err := b.secretValue(ns, name, key)
		return v, true, err
	}
}

// triggerState says whether a trigger can be active and, when not, why (problem: its
// kind's reason it cannot run).
func triggerState(spec api.TriggerSpec, host, problem string) (bool, string) {
	switch {
	case !spec.Enabled:
		return false, "enabled is false: frozen in place"
	case problem != "":
		return false, problem
	case host == "":
		return false, fmt.Sprintf("waiting for function %q to be Ready", spec.Function)
	}
	return true, ""
}

// setTriggerStatus changes a trigger's status as of generation gen (0: whichever it has).
func (b *Backend) setTriggerStatus(key string, gen int64, change func(*api.TriggerStatus)) error {
	return setStatus(b, triggers, key, func(r *triggerRecord) bool {
		if gen > 0 {
			if r.Generation < gen {
				return false
			}
			r.ObservedGeneration = gen
		}
		change(&r.Status)
		return true
	})
}

// noteTrigger writes a runner's finding about its trigger; a failed write is only logged
// (the runner has nothing to retry).
func (b *Backend) noteTrigger(key string, change func(*api.TriggerStatus)) {
	if err := b.setTriggerStatus(key, 0, change); err != nil {
		b.log.Error("persisting trigger status", "trigger", key, "error", err)
	}
}

// invoker calls a deployed function through the pool, as the gateway's /fn/ would, signed
// with the function's key, with the values of its secrets masked in the answers the history
// and asynchronous results keep.
func (b *Backend) invoker(host string) dispatcher.Invoker {
	fnKey, _, _ := b.keyOfHost(host)
	return dispatcher.MaskingInvoker{
		Inner: &dispatcher.HTTPInvoker{URL: "http://" + host + "/", Client: &http.Client{Transport: revisionRouter{b}},
			Key: b.functionKey(splitKey(fnKey))},
		Masker: func(context.Context) (*rules.SecretMasker, error) { return b.maskOf(fnKey), nil },
	}
}

// functionKey is the key calls to function ns/name are signed with.
func (b *Backend) functionKey(ns, name string) []byte { return rules.FunctionKey(b.identity, ns, name) }

// IdentityMaster is the master key of the functions' keys, for the gateway that signs
// their /fn/ calls (gateway.Config.IdentityMaster).
func (b *Backend) IdentityMaster() []byte { return b.identity }
