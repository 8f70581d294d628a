package devplane

import (
	"context"
	"slices"
	"strings"

	"sless.dev/sless/gateway"
	"sless.dev/sless/gateway/api"
)

// The REST objects: each write is persisted before it is acknowledged (commitLocked) and then
// kicks the reconcile of what it affects.

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
