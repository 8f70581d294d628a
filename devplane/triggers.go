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
)

// runnerConfig is everything a running cron or event trigger depends on; a change to any of
// it restarts the runner.
type runnerConfig struct {
	Type, Schedule, Timezone, Queue, DeadLetterQueue string
	MaxAttempts, BackoffMs, PrewarmSeconds           int32
	Host                                             string
	Timeout                                          time.Duration
	// BrokerURL is an event trigger's broker: its broker secret's value, or sless dev's own.
	BrokerURL string
}

type runner struct {
	cfg    runnerConfig
	cancel context.CancelFunc
	done   chan struct{}
}

// runners are the goroutines firing cron and event triggers, one per active trigger.
type runners struct {
	mu sync.Mutex
	m  map[string]*runner
}

// set makes trigger key run cfg (nil: nothing), restarting it when cfg changed.
func (rs *runners) set(parent context.Context, key string, cfg *runnerConfig, run func(ctx context.Context, cfg runnerConfig)) {
	rs.mu.Lock()
	old := rs.m[key]
	if old != nil && cfg != nil && old.cfg == *cfg {
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
		r = &runner{cfg: *cfg, cancel: cancel, done: make(chan struct{})}
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
			run(ctx, r.cfg)
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
	var timeoutSec int32
	if fn := snap.functions[fnKey]; fn != nil {
		timeoutSec = fn.Spec.TimeoutSec
	}
	ns, name := splitKey(key)
	broker, brokerErr := b.brokerURL(ns, spec)
	active, msg := b.triggerState(spec, dep.host, broker, brokerErr)
	var cfg *runnerConfig
	if active && spec.Type != api.TriggerHTTP {
		cfg = &runnerConfig{Type: spec.Type, Schedule: spec.Schedule, Timezone: spec.Timezone, Queue: spec.Queue,
			DeadLetterQueue: spec.DeadLetterQueue, MaxAttempts: spec.MaxAttempts, BackoffMs: spec.BackoffMs, Host: dep.host,
			PrewarmSeconds: spec.PrewarmSeconds, BrokerURL: broker}
		cfg.Timeout = rules.InvocationDeadline(timeoutSec)
	}
	ref := dispatcher.FunctionRef{Namespace: ns, Name: spec.Function}
	b.runners.set(b.ctx, key, cfg, func(ctx context.Context, c runnerConfig) {
		if c.Type == api.TriggerCron {
			b.runCron(ctx, key, name, ref, c)
		} else {
			b.runEvents(ctx, key, name, ref, c)
		}
	})
	return b.setTriggerStatus(key, gen, func(st *api.TriggerStatus) {
		st.Active, st.Message, st.URL = active, msg, ""
		if spec.Type == api.TriggerHTTP {
			st.URL = b.functionURL(ns, spec.Function)
		}
	})
}

// brokerURL is an event trigger's broker: the value of broker_secret_key in the tenant's
// secret broker_secret when that secret exists (as a cluster's KEDA reads it), else the one
// sless dev was started with.
func (b *Backend) brokerURL(ns string, spec api.TriggerSpec) (string, error) {
	if spec.Type != api.TriggerEvent {
		return "", nil
	}
	if _, ok := b.secrets.get(objectKey(ns, spec.BrokerSecret)); !ok {
		return b.opts.AMQPURL, nil
	}
	v, err := b.secretValue(ns, spec.BrokerSecret, spec.BrokerSecretKey)
	return string(v), err
}

// triggerState says whether a trigger can be active and, when not, why.
func (b *Backend) triggerState(spec api.TriggerSpec, host, broker string, brokerErr error) (bool, string) {
	switch {
	case !spec.Enabled:
		return false, "enabled is false: frozen in place"
	case brokerErr != nil:
		return false, "broker URL: " + brokerErr.Error()
	case spec.Type == api.TriggerEvent && broker == "":
		return false, fmt.Sprintf("no AMQP broker: create the secret %s with key %s holding the amqp:// URL, or start sless dev with --amqp-url (or SLESS_AMQP_URL)", spec.BrokerSecret, spec.BrokerSecretKey)
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

// runCron fires at every tick of the schedule in its time zone, having woken the function
// prewarm_seconds before when asked. A tick that comes while the previous firing still runs
// is skipped (the cluster CronJob's Forbid policy).
func (b *Backend) runCron(ctx context.Context, key, trigger string, ref dispatcher.FunctionRef, cfg runnerConfig) {
	loc := time.UTC
	if cfg.Timezone != "" {
		l, err := time.LoadLocation(cfg.Timezone)
		if err != nil {
			b.noteTrigger(key, func(st *api.TriggerStatus) { st.Active, st.Message = false, "timezone: "+err.Error() })
			return
		}
		loc = l
	}
	sched, err := rules.ParseSchedule(cfg.Schedule)
	if err != nil {
		b.noteTrigger(key, func(st *api.TriggerStatus) { st.Active, st.Message = false, "schedule: "+err.Error() })
		return
	}
	inv := b.invoker(cfg.Host)
	for {
		next := sched.Next(time.Now().In(loc))
		if cfg.PrewarmSeconds > 0 {
			from, until := rules.PrewarmWindow(next, time.Duration(cfg.PrewarmSeconds)*time.Second)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(from)):
			}
			go dispatcher.Warm(ctx, &http.Client{Transport: revisionRouter{b}}, "http://"+cfg.Host, "", 0, until, b.log.With("trigger", key))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
		err := dispatcher.Fire(ctx, dispatcher.FireConfig{
			Function: ref, Trigger: trigger, Schedule: cfg.Schedule, Timezone: cfg.Timezone, Now: next,
			Timeout: cfg.Timeout, Invoker: inv, Recorder: b.opts.Recorder, Logger: b.log,
		})
		if err != nil && ctx.Err() == nil {
			b.log.Warn("Warning: cron firing failed", "trigger", key, "tick", next, "error", err)
		}
		fired := next.UTC()
		b.noteTrigger(key, func(st *api.TriggerStatus) { st.LastFireTime = &fired })
	}
}

// runEvents consumes the trigger's queue until ctx ends; dispatcher.Run reconnects by itself
// and returns early only for configuration errors, which the trigger status then shows.
func (b *Backend) runEvents(ctx context.Context, key, trigger string, ref dispatcher.FunctionRef, cfg runnerConfig) {
	_, err := dispatcher.Run(ctx, dispatcher.Config{
		URL: cfg.BrokerURL, Queue: cfg.Queue, DeadLetterQueue: cfg.DeadLetterQueue, Function: ref, Trigger: trigger,
		Retry:   dispatcher.RetryPolicy{MaxAttempts: int(cfg.MaxAttempts), Backoff: time.Duration(cfg.BackoffMs) * time.Millisecond},
		Timeout: cfg.Timeout, Invoker: b.invoker(cfg.Host), Recorder: b.opts.Recorder, Logger: b.log,
		ConnectionName: "sless dev " + key,
	})
	if err != nil && ctx.Err() == nil {
		b.log.Error("event trigger stopped", "trigger", key, "error", err)
		b.noteTrigger(key, func(st *api.TriggerStatus) { st.Active, st.Message = false, err.Error() })
	}
}
