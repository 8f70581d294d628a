// Package cluster is the gateway's Backend on Kubernetes: REST calls map onto the Function,
// Trigger and FunctionJob CRDs through the controller-runtime client, and /fn/ routes come
// from informer caches, so an invocation never waits on the API server.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/scheme"
	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway"
	"sless.dev/sless/gateway/api"
)

// Options configures the cluster backend.
type Options struct {
	// InterceptorURL is the KEDA HTTP interceptor's proxy, e.g.
	// http://keda-add-ons-http-interceptor-proxy.keda:8080. Every /fn/ request is sent there
	// with the function's routing host.
	InterceptorURL string
	Logger         *slog.Logger
}

// Backend implements gateway.Backend on a Kubernetes API server.
type Backend struct {
	client    client.Client // direct: REST answers must reflect the write just made
	cache     cache.Cache
	routes    *routeTable
	transport http.RoundTripper
	log       *slog.Logger
}

var _ gateway.Backend = (*Backend)(nil)

// New connects to the API server at cfg, starts the informers /fn/ routing uses and waits
// until they are synced (bounded by ctx). The informers stop when ctx ends.
func New(ctx context.Context, cfg *rest.Config, opts Options) (*Backend, error) {
	target, err := interceptorAddr(opts.InterceptorURL)
	if err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s, err := scheme.New()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	ca, err := cache.New(cfg, cache.Options{Scheme: s, DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		return nil, fmt.Errorf("kubernetes cache: %w", err)
	}
	b := &Backend{client: c, cache: ca, transport: newInterceptorTransport(target), log: opts.Logger.With("component", "gateway-cluster")}
	b.routes = newRouteTable(ca, b.log)
	if err := b.routes.watch(ctx); err != nil {
		return nil, err
	}
	go func() {
		if err := ca.Start(ctx); err != nil {
			b.log.Error("informer cache stopped", "error", err)
		}
	}()
	if !ca.WaitForCacheSync(ctx) {
		return nil, errors.New("informer caches did not sync; check the API server and the sless CRDs")
	}
	return b, nil
}

// interceptorAddr validates the interceptor URL and returns its host:port.
func interceptorAddr(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return "", fmt.Errorf("interceptor URL %q: want http://host[:port] (the KEDA HTTP add-on interceptor proxy service)", raw)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "80")
	}
	return host, nil
}

// newInterceptorTransport dials the interceptor for every request; the request's Host (the
// routing host) tells the interceptor which function it is for.
func newInterceptorTransport(addr string) http.RoundTripper {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 512,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // bodies pass through untouched
	}
}

// Transport carries /fn/ requests to the interceptor.
func (b *Backend) Transport() http.RoundTripper { return b.transport }

// Route answers from the informer-fed route table.
func (b *Backend) Route(ns, name string) (gateway.Route, error) {
	r, ok := b.routes.get(ns, name)
	if !ok {
		return gateway.Route{}, &gateway.NotFoundError{Kind: "function", Namespace: ns, Name: name}
	}
	return r, nil
}

// EnsureNamespace creates the tenant namespace if it is missing.
func (b *Backend) EnsureNamespace(ctx context.Context, ns string) error {
	obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"app.kubernetes.io/managed-by": "sless"}}}
	if err := b.client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	return nil
}

// create creates obj, creating its namespace first when it is missing.
func (b *Backend) create(ctx context.Context, kind string, obj client.Object) error {
	err := b.client.Create(ctx, obj)
	if apierrors.IsNotFound(err) {
		if err := b.EnsureNamespace(ctx, obj.GetNamespace()); err != nil {
			return err
		}
		err = b.client.Create(ctx, obj)
	}
	return mapError(err, kind, obj.GetNamespace(), obj.GetName())
}

func (b *Backend) get(ctx context.Context, kind, ns, name string, obj client.Object) error {
	return mapError(b.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj), kind, ns, name)
}

func (b *Backend) delete(ctx context.Context, kind, ns, name string, obj client.Object) error {
	obj.SetNamespace(ns)
	obj.SetName(name)
	return mapError(b.client.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground)), kind, ns, name)
}

// update reads obj, lets mutate change it and writes it back, retrying on write conflicts.
func (b *Backend) update(ctx context.Context, kind, ns, name string, obj client.Object, mutate func() error) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := b.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
			return err
		}
		if err := mutate(); err != nil {
			return err
		}
		return b.client.Update(ctx, obj)
	})
	return mapError(err, kind, ns, name)
}

// ListFunctions lists the namespace's functions, sorted by name.
func (b *Backend) ListFunctions(ctx context.Context, ns string) ([]api.Function, error) {
	var list v1alpha1.FunctionList
	if err := b.client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("list functions in %s: %w", ns, err)
	}
	out := make([]api.Function, len(list.Items))
	for i := range list.Items {
		out[i] = functionOf(&list.Items[i])
	}
	slices.SortFunc(out, func(a, b api.Function) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (b *Backend) GetFunction(ctx context.Context, ns, name string) (api.Function, error) {
	var fn v1alpha1.Function
	if err := b.get(ctx, "function", ns, name, &fn); err != nil {
		return api.Function{}, err
	}
	return functionOf(&fn), nil
}

func (b *Backend) CreateFunction(ctx context.Context, ns, name string, spec api.FunctionSpec) (api.Function, error) {
	fn := &v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	applyFunctionSpec(&fn.Spec, spec)
	if err := b.create(ctx, "function", fn); err != nil {
		return api.Function{}, err
	}
	return functionOf(fn), nil
}

func (b *Backend) UpdateFunction(ctx context.Context, ns, name string, mutate func(*api.FunctionSpec) error) (api.Function, error) {
	var fn v1alpha1.Function
	err := b.update(ctx, "function", ns, name, &fn, func() error {
		spec := functionOf(&fn).FunctionSpec
		if err := mutate(&spec); err != nil {
			return err
		}
		applyFunctionSpec(&fn.Spec, spec)
		return nil
	})
	if err != nil {
		return api.Function{}, err
	}
	return functionOf(&fn), nil
}

func (b *Backend) DeleteFunction(ctx context.Context, ns, name string) error {
	return b.delete(ctx, "function", ns, name, &v1alpha1.Function{})
}

// ListTriggers lists the namespace's triggers, sorted by name.
func (b *Backend) ListTriggers(ctx context.Context, ns string) ([]api.Trigger, error) {
	var list v1alpha1.TriggerList
	if err := b.client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("list triggers in %s: %w", ns, err)
	}
	out := make([]api.Trigger, len(list.Items))
	for i := range list.Items {
		out[i] = triggerOf(&list.Items[i])
	}
	slices.SortFunc(out, func(a, b api.Trigger) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (b *Backend) GetTrigger(ctx context.Context, ns, name string) (api.Trigger, error) {
	var t v1alpha1.Trigger
	if err := b.get(ctx, "trigger", ns, name, &t); err != nil {
		return api.Trigger{}, err
	}
	return triggerOf(&t), nil
}

func (b *Backend) CreateTrigger(ctx context.Context, ns, name string, spec api.TriggerSpec) (api.Trigger, error) {
	t := &v1alpha1.Trigger{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	applyTriggerSpec(&t.Spec, spec)
	if err := b.create(ctx, "trigger", t); err != nil {
		return api.Trigger{}, err
	}
	return triggerOf(t), nil
}

func (b *Backend) UpdateTrigger(ctx context.Context, ns, name string, mutate func(*api.TriggerSpec) error) (api.Trigger, error) {
	var t v1alpha1.Trigger
	err := b.update(ctx, "trigger", ns, name, &t, func() error {
		spec := triggerOf(&t).TriggerSpec
		if err := mutate(&spec); err != nil {
			return err
		}
		applyTriggerSpec(&t.Spec, spec)
		return nil
	})
	if err != nil {
		return api.Trigger{}, err
	}
	return triggerOf(&t), nil
}

func (b *Backend) DeleteTrigger(ctx context.Context, ns, name string) error {
	return b.delete(ctx, "trigger", ns, name, &v1alpha1.Trigger{})
}

// ListJobs lists the namespace's jobs, sorted by name.
func (b *Backend) ListJobs(ctx context.Context, ns string) ([]api.Job, error) {
	var list v1alpha1.FunctionJobList
	if err := b.client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("list jobs in %s: %w", ns, err)
	}
	out := make([]api.Job, len(list.Items))
	for i := range list.Items {
		out[i] = jobOf(&list.Items[i])
	}
	slices.SortFunc(out, func(a, b api.Job) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (b *Backend) GetJob(ctx context.Context, ns, name string) (api.Job, error) {
	var j v1alpha1.FunctionJob
	if err := b.get(ctx, "job", ns, name, &j); err != nil {
		return api.Job{}, err
	}
	return jobOf(&j), nil
}

func (b *Backend) CreateJob(ctx context.Context, ns, name string, spec api.JobSpec) (api.Job, error) {
	j := &v1alpha1.FunctionJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	applyJobSpec(&j.Spec, spec)
	if err := b.create(ctx, "job", j); err != nil {
		return api.Job{}, err
	}
	return jobOf(j), nil
}

func (b *Backend) UpdateJob(ctx context.Context, ns, name string, mutate func(*api.JobSpec) error) (api.Job, error) {
	var j v1alpha1.FunctionJob
	err := b.update(ctx, "job", ns, name, &j, func() error {
		spec := jobOf(&j).JobSpec
		if err := mutate(&spec); err != nil {
			return err
		}
		applyJobSpec(&j.Spec, spec)
		return nil
	})
	if err != nil {
		return api.Job{}, err
	}
	return jobOf(&j), nil
}

func (b *Backend) DeleteJob(ctx context.Context, ns, name string) error {
	return b.delete(ctx, "job", ns, name, &v1alpha1.FunctionJob{})
}
