package devplane

import (
	"strings"
	"sync"
)

// keyed runs at most one reconcile per key at a time; a kick during a run schedules exactly
// one more run, so bursts of changes collapse and the last state always gets reconciled.
type keyed struct {
	mu      sync.Mutex
	running map[string]bool
	dirty   map[string]bool
	wg      sync.WaitGroup
}

func (k *keyed) kick(key string, run func(key string)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.running == nil {
		k.running, k.dirty = map[string]bool{}, map[string]bool{}
	}
	if k.running[key] {
		k.dirty[key] = true
		return
	}
	k.running[key] = true
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		for {
			run(key)
			k.mu.Lock()
			if !k.dirty[key] {
				delete(k.running, key)
				k.mu.Unlock()
				return
			}
			delete(k.dirty, key)
			k.mu.Unlock()
		}
	}()
}

// wait blocks until no reconcile runs.
func (k *keyed) wait() { k.wg.Wait() }

func (b *Backend) kickFunction(key string) { b.work.kick("function/"+key, b.reconcileWork) }
func (b *Backend) kickTrigger(key string)  { b.work.kick("trigger/"+key, b.reconcileWork) }
func (b *Backend) kickJob(key string)      { b.work.kick("job/"+key, b.reconcileWork) }

// reconcileWork dispatches a queued key to its kind's reconcile; nothing runs after Close.
func (b *Backend) reconcileWork(key string) {
	if b.ctx.Err() != nil {
		return
	}
	kind, obj, _ := strings.Cut(key, "/")
	switch kind {
	case "function":
		b.reconcileFunction(obj)
	case "trigger":
		b.reconcileTrigger(obj)
	case "job":
		b.reconcileJob(obj)
	}
}
