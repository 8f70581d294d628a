package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/rules"
	"sless.dev/sless/scaling"
)

// triggerFunctionIndex indexes Triggers by the function they fire.
const triggerFunctionIndex = "spec.functionRef.name"

// routeTable holds the /fn/ route of every function, recomputed by informer events so that a
// lookup is one map read.
type routeTable struct {
	cache cache.Cache
	log   *slog.Logger

	mu     sync.RWMutex
	routes map[client.ObjectKey]backend.Route
}

func newRouteTable(c cache.Cache, log *slog.Logger) *routeTable {
	return &routeTable{cache: c, log: log, routes: map[client.ObjectKey]backend.Route{}}
}

func (t *routeTable) get(ns, name string) (backend.Route, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	r, ok := t.routes[client.ObjectKey{Namespace: ns, Name: name}]
	return r, ok
}

// watch registers the index and event handlers; call before the cache starts.
func (t *routeTable) watch(ctx context.Context) error {
	err := t.cache.IndexField(ctx, &v1alpha1.Trigger{}, triggerFunctionIndex, func(o client.Object) []string {
		return []string{o.(*v1alpha1.Trigger).Spec.FunctionRef.Name}
	})
	if err != nil {
		return fmt.Errorf("index triggers by function: %w", err)
	}
	for _, obj := range []client.Object{&v1alpha1.Function{}, &v1alpha1.Trigger{}} {
		inf, err := t.cache.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("informer for %T: %w", obj, err)
		}
		h := toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { t.changed(ctx, o) },
			UpdateFunc: func(old, o any) { t.changed(ctx, old); t.changed(ctx, o) }, // a trigger may move to another function
			DeleteFunc: func(o any) { t.changed(ctx, o) },
		}
		if _, err := inf.AddEventHandler(h); err != nil {
			return fmt.Errorf("watch %T: %w", obj, err)
		}
	}
	return nil
}

// changed recomputes the route of the function an event is about.
func (t *routeTable) changed(ctx context.Context, o any) {
	if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	var key client.ObjectKey
	switch obj := o.(type) {
	case *v1alpha1.Function:
		key = client.ObjectKeyFromObject(obj)
	case *v1alpha1.Trigger:
		key = client.ObjectKey{Namespace: obj.Namespace, Name: obj.Spec.FunctionRef.Name}
	default:
		return
	}
	if err := t.refresh(ctx, key); err != nil {
		t.log.Error("recompute /fn/ route", "function", key, "error", err)
	}
}

func (t *routeTable) refresh(ctx context.Context, key client.ObjectKey) error {
	var fn v1alpha1.Function
	if err := t.cache.Get(ctx, key, &fn); err != nil {
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		t.mu.Lock()
		delete(t.routes, key)
		t.mu.Unlock()
		return nil
	}
	var triggers v1alpha1.TriggerList
	if err := t.cache.List(ctx, &triggers, client.InNamespace(key.Namespace), client.MatchingFields{triggerFunctionIndex: key.Name}); err != nil {
		return err
	}
	r := routeOf(&fn, triggers.Items)
	t.mu.Lock()
	t.routes[key] = r
	t.mu.Unlock()
	return nil
}

// routeOf derives a function's route: its revisions by the traffic the operator resolved,
// each under its routing host, its timeout, whether an enabled http trigger requires auth,
// and whether all of its http triggers are disabled. A function the operator has not given
// revisions yet is called on its own host.
func routeOf(fn *v1alpha1.Function, triggers []v1alpha1.Trigger) backend.Route {
	asyncReady := fn.Spec.Async.Enabled && meta.IsStatusConditionTrue(fn.Status.Conditions, v1alpha1.ConditionAsync)
	r := backend.RouteOf(fn.Status.RoutingHost, fn.Spec.TimeoutSeconds, fn.Spec.StreamIdleTimeoutSeconds, fn.Spec.MemoryMB, scaling.HTTPGate(triggers), asyncReady, fn.Spec.Async.Retry.MaxAttempts)
	// The operator's routing domain, read off the function's own routing host.
	domain, ok := strings.CutPrefix(fn.Status.RoutingHost, rules.RoutingHost(fn.Namespace, fn.Name, ""))
	for _, t := range fn.Status.Traffic {
		target := backend.RouteTarget{ResolvedTarget: rules.ResolvedTarget(t)}
		if t.Revision != "" && ok {
			target.Host = rules.RevisionHost(fn.Namespace, t.Revision, domain)
		}
		r.Targets = append(r.Targets, target)
	}
	return r
}
