package devplane

import (
	"context"
	"slices"
	"strings"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/rules"
)

// The REST objects. Each kind is declared once (a kindOps); list, get, create, update and
// delete are written once for all of them. A write is persisted before it is acknowledged
// and then kicks the reconciles it affects.

// kindOps is a table plus what the API needs of its kind.
type kindOps[S, T, O any] struct {
	table[S, T]
	// view is the kind's wire form.
	view func(*record[S, T]) O
	// initial is the status of a new object.
	initial T
	// check applies the kind's own rules to a new spec (old is nil at create).
	check func(b *Backend, ns string, old *record[S, T], spec S) error
	// written, when set, completes a record about to be written with a new spec (a
	// function's new revision is made with the change that makes it).
	written func(*record[S, T])
	// affected lists the keys of other objects to reconcile when an object of this kind
	// changes (the function an http trigger gates, for instance).
	affected func(ns string, spec S) []string
	// kick reconciles one object of this kind.
	kick func(b *Backend, key string)
}

var (
	functionKind = kindOps[api.FunctionSpec, functionStatus, api.Function]{table: functions, view: functionOf,
		initial: functionStatus{FunctionStatus: api.FunctionStatus{Phase: api.PhasePending}}, kick: (*Backend).kickFunction,
		check: func(_ *Backend, _ string, old *functionRecord, spec api.FunctionSpec) error {
			if err := runtimeHere(spec.Runtime); err != nil {
				return err
			}
			var revs []api.Revision
			if old != nil {
				revs = old.Status.Revisions
			}
			return checkTraffic(revs, spec)
		},
		written: func(r *functionRecord) { newRevision(r) }}
	triggerKind = kindOps[api.TriggerSpec, api.TriggerStatus, api.Trigger]{table: triggers, view: triggerOf,
		check: checkTrigger, kick: (*Backend).kickTrigger,
		affected: func(ns string, spec api.TriggerSpec) []string {
			return []string{"function/" + objectKey(ns, spec.Function)}
		}}
	jobKind = kindOps[api.JobSpec, api.JobStatus, api.Job]{table: jobs, view: jobOf,
		initial: api.JobStatus{Phase: api.JobPending}, kick: (*Backend).kickJob,
		check: func(_ *Backend, _ string, _ *jobRecord, spec api.JobSpec) error { return runtimeHere(spec.Runtime) }}
)

// runtimeHere refuses a runtime whose interpreter this machine lacks ("" is none: a job of
// a function), saying what to install: sless dev runs functions with the local ones.
func runtimeHere(runtime string) error {
	if runtime == "" {
		return nil
	}
	rt, err := buildkit.LookupRuntime(runtime)
	if err == nil {
		_, err = buildkit.Interpreter(rt)
	}
	if err != nil {
		return &backend.InvalidError{Field: "runtime", Reason: err.Error()}
	}
	return nil
}

// checkTrigger keeps a trigger's type.
func checkTrigger(_ *Backend, _ string, old *triggerRecord, spec api.TriggerSpec) error {
	if old != nil && spec.Type != old.Spec.Type {
		return &backend.InvalidError{Field: "type", Reason: rules.TriggerTypeImmutable}
	}
	return nil
}

// objects is the backend.Store of kind k.
type objects[S, T, O any] struct {
	b *Backend
	k kindOps[S, T, O]
}

func (b *Backend) Functions() backend.Store[api.Function, api.FunctionSpec] {
	return objects[api.FunctionSpec, functionStatus, api.Function]{b, functionKind}
}

func (b *Backend) Triggers() backend.Store[api.Trigger, api.TriggerSpec] {
	return objects[api.TriggerSpec, api.TriggerStatus, api.Trigger]{b, triggerKind}
}

func (b *Backend) Jobs() backend.Store[api.Job, api.JobSpec] {
	return objects[api.JobSpec, api.JobStatus, api.Job]{b, jobKind}
}

func (o objects[S, T, O]) List(_ context.Context, ns string) ([]O, error) {
	b, k := o.b, o.k
	var out []*record[S, T]
	for _, r := range *k.of(b.store.snapshot()) {
		if r.Namespace == ns {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(x, y *record[S, T]) int { return strings.Compare(x.Name, y.Name) })
	views := make([]O, len(out))
	for i, r := range out {
		views[i] = k.view(r)
	}
	return views, nil
}

func (o objects[S, T, O]) Get(_ context.Context, ns, name string) (O, error) {
	b, k := o.b, o.k
	r, ok := (*k.of(b.store.snapshot()))[objectKey(ns, name)]
	if !ok {
		var zero O
		return zero, notFound(k.kind, ns, name)
	}
	return k.view(r), nil
}

func (o objects[S, T, O]) Create(_ context.Context, ns, name string, spec S) (O, error) {
	b, k := o.b, o.k
	key := objectKey(ns, name)
	var created *record[S, T]
	var zero O
	err := b.store.write(false, func(tx *txn) error {
		m := *k.of(tx.next)
		if _, ok := m[key]; ok {
			return exists(k.kind, ns, name)
		}
		if n := countIn(m, ns); n >= b.opts.MaxPerNamespace {
			return &backend.QuotaError{Kind: k.kind, Namespace: ns, Limit: b.opts.MaxPerNamespace}
		}
		if k.check != nil {
			if err := k.check(b, ns, nil, spec); err != nil {
				return err
			}
		}
		tx.claim(k.kind + " quota of " + ns) // creates in one namespace are counted one after another
		created = &record[S, T]{meta: newMeta(ns, name), Spec: k.clone(spec), Status: k.initial}
		if k.written != nil {
			k.written(created)
		}
		tx.putNamespace(b.store.root, ns)
		return put(tx, b.store.root, k.table, key, created)
	})
	if err != nil {
		return zero, err
	}
	kickAfter(b, k, key, ns, created.Spec)
	return k.view(created), nil
}

func (o objects[S, T, O]) Update(_ context.Context, ns, name string, mutate func(*S) error) (O, error) {
	b, k := o.b, o.k
	key := objectKey(ns, name)
	var before, after *record[S, T]
	var zero O
	err := b.store.write(false, func(tx *txn) error {
		old, ok := (*k.of(tx.next))[key]
		if !ok {
			return notFound(k.kind, ns, name)
		}
		before, after = old, old
		spec := k.clone(old.Spec)
		if err := mutate(&spec); err != nil {
			return err
		}
		spec = k.withDefaults(spec) // as put stores it: sending a default is no change
		if equalJSON(spec, old.Spec) {
			return nil // no change, no new generation (like an API server)
		}
		if k.check != nil {
			if err := k.check(b, ns, old, spec); err != nil {
				return err
			}
		}
		after = k.copyRecord(old)
		after.Spec, after.Generation = spec, old.Generation+1
		if k.written != nil {
			k.written(after)
		}
		return put(tx, b.store.root, k.table, key, after)
	})
	if err != nil {
		return zero, err
	}
	if after != before {
		kickAfter(b, k, key, ns, before.Spec)
		kickAfter(b, k, key, ns, after.Spec)
	}
	return k.view(after), nil
}

func (o objects[S, T, O]) Delete(_ context.Context, ns, name string) error {
	b, k := o.b, o.k
	key := objectKey(ns, name)
	var gone *record[S, T]
	err := b.store.write(false, func(tx *txn) error {
		r, ok := (*k.of(tx.next))[key]
		if !ok {
			return notFound(k.kind, ns, name)
		}
		gone = r
		remove(tx, b.store.root, k.table, key)
		return nil
	})
	if err != nil {
		return err
	}
	kickAfter(b, k, key, ns, gone.Spec)
	return nil
}

// kickAfter reconciles an object of kind k after a change, and what the change affects.
func kickAfter[S, T, O any](b *Backend, k kindOps[S, T, O], key, ns string, spec S) {
	k.kick(b, key)
	if k.affected != nil {
		for _, item := range k.affected(ns, spec) {
			b.queue.Add(item)
		}
	}
}

func countIn[R any](m map[string]*R, ns string) int {
	n := 0
	for key := range m {
		if strings.HasPrefix(key, ns+"/") {
			n++
		}
	}
	return n
}
