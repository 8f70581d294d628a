// Package cluster is the gateway's backend.Backend on Kubernetes: REST calls map onto the Function,
// Trigger and FunctionJob CRDs through the controller-runtime client, and /fn/ routes come
// from informer caches, so an invocation never waits on the API server.
package cluster

import (
	"cmp"
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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/scheme"
	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/rules"
	"sless.dev/sless/scaling"
	"sless.dev/sless/triggers"
)

// Options configures the cluster backend.
type Options struct {
	// InterceptorURL is the KEDA HTTP interceptor's proxy, e.g.
	// http://keda-add-ons-http-interceptor-proxy.keda:8080. Every /fn/ request is sent there
	// with the function's routing host.
	InterceptorURL string
	// BuildNamespace is where the operator runs builds (their logs are read there). Default
	// sless-system.
	BuildNamespace string
	Logger         *slog.Logger
}

// Backend implements backend.Backend on a Kubernetes API server.
type Backend struct {
	client client.Client // direct: REST answers must reflect the write just made
	pods   kubernetes.Interface
	cache  cache.Cache
	// buildNamespace holds the build pods.
	buildNamespace string
	routes         *routeTable
	transport      http.RoundTripper
	log            *slog.Logger
}

var _ backend.Backend = (*Backend)(nil)

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
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if opts.BuildNamespace == "" {
		opts.BuildNamespace = "sless-system"
	}
	b := &Backend{client: c, pods: cs, cache: ca, buildNamespace: opts.BuildNamespace,
		transport: newInterceptorTransport(target), log: opts.Logger.With("component", "gateway-cluster")}
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
// routing host) tells the interceptor which function it is for. A call that came over
// HTTP/2 goes on over HTTP/2 without TLS (the interceptor serves h2c beside HTTP/1.1), so
// what only HTTP/2 carries, a gRPC call's trailers and its full-duplex streams, reaches a
// function that speaks h2c (protocol h2c) unchanged; every other call, upgrades among them,
// goes over HTTP/1.1. The interceptor picks its own protocol to the pods by their Service.
func newInterceptorTransport(addr string) http.RoundTripper {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	h1 := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 512,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // bodies pass through untouched
	}
	h2c := h1.Clone()
	h2c.Protocols = new(http.Protocols)
	h2c.Protocols.SetUnencryptedHTTP2(true)
	return byCallerProtocol{h1: h1, h2c: h2c}
}

// byCallerProtocol sends a request on in the HTTP major version it came in with.
type byCallerProtocol struct{ h1, h2c http.RoundTripper }

func (t byCallerProtocol) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.ProtoMajor == 2 {
		return t.h2c.RoundTrip(r)
	}
	return t.h1.RoundTrip(r)
}

// Transport carries /fn/ requests to the interceptor.
func (b *Backend) Transport() http.RoundTripper { return b.transport }

// Route answers from the informer-fed route table.
func (b *Backend) Route(ns, name string) (backend.Route, error) {
	r, ok := b.routes.get(ns, name)
	if !ok {
		return backend.Route{}, &backend.NotFoundError{Kind: "function", Namespace: ns, Name: name}
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

// kind is one CRD of the API for the CRUD below, written once for all of them: T is the
// object, L its list, S the API's spec and O the API's view of it.
type kind[T any, PT objectPtr[T], L any, PL listPtr[L], S, O any] struct {
	name  string
	items func(*L) []T
	view  func(*T) O
	spec  func(O) S
	// apply writes a spec into an object; an error refuses the spec.
	apply func(*T, S) error
	// selector, when set, is the label every object of the kind carries: others of the same
	// API kind (a namespace's other Secrets) are not the API's, so they are neither listed
	// nor found.
	selector map[string]string
}

// owns reports whether obj is one of k's objects.
func (k kind[T, PT, L, PL, S, O]) owns(obj PT) bool {
	for key, v := range k.selector {
		if obj.GetLabels()[key] != v {
			return false
		}
	}
	return true
}

type objectPtr[T any] interface {
	*T
	client.Object
}

type listPtr[L any] interface {
	*L
	client.ObjectList
}

var (
	functionKind = kind[v1alpha1.Function, *v1alpha1.Function, v1alpha1.FunctionList, *v1alpha1.FunctionList, api.FunctionSpec, api.Function]{
		name: "function", items: func(l *v1alpha1.FunctionList) []v1alpha1.Function { return l.Items }, view: functionOf,
		spec: func(f api.Function) api.FunctionSpec { return f.FunctionSpec }, apply: func(o *v1alpha1.Function, s api.FunctionSpec) error { return applyFunctionSpec(&o.Spec, s) }}
	triggerKind = kind[v1alpha1.Trigger, *v1alpha1.Trigger, v1alpha1.TriggerList, *v1alpha1.TriggerList, api.TriggerSpec, api.Trigger]{
		name: "trigger", items: func(l *v1alpha1.TriggerList) []v1alpha1.Trigger { return l.Items }, view: triggerOf,
		spec: func(t api.Trigger) api.TriggerSpec { return t.TriggerSpec }, apply: func(o *v1alpha1.Trigger, s api.TriggerSpec) error { triggers.ToCRD(&o.Spec, s); return nil }}
	jobKind = kind[v1alpha1.FunctionJob, *v1alpha1.FunctionJob, v1alpha1.FunctionJobList, *v1alpha1.FunctionJobList, api.JobSpec, api.Job]{
		name: "job", items: func(l *v1alpha1.FunctionJobList) []v1alpha1.FunctionJob { return l.Items }, view: jobOf,
		spec: func(j api.Job) api.JobSpec { return j.JobSpec }, apply: func(o *v1alpha1.FunctionJob, s api.JobSpec) error { applyJobSpec(&o.Spec, s); return nil }}
	// A secret is a Kubernetes Secret labelled as the API's; its view has no values, so an
	// update starts from empty data (the new data replaces the old whole).
	secretKind = kind[corev1.Secret, *corev1.Secret, corev1.SecretList, *corev1.SecretList, api.SecretSpec, api.Secret]{
		name: "secret", items: func(l *corev1.SecretList) []corev1.Secret { return l.Items }, view: secretOf,
		spec: func(api.Secret) api.SecretSpec { return api.SecretSpec{} }, apply: func(o *corev1.Secret, s api.SecretSpec) error { applySecretData(o, s); return nil },
		selector: map[string]string{rules.SecretLabel: "true"}}
)

// store is the Store of kind k.
type store[T any, PT objectPtr[T], L any, PL listPtr[L], S, O any] struct {
	b *Backend
	k kind[T, PT, L, PL, S, O]
}

func (b *Backend) Functions() backend.Store[api.Function, api.FunctionSpec] {
	return functionStore{store[v1alpha1.Function, *v1alpha1.Function, v1alpha1.FunctionList, *v1alpha1.FunctionList, api.FunctionSpec, api.Function]{b, functionKind}}
}

// functionStore refuses traffic that names a revision the function does not have or one
// that failed, before the write.
type functionStore struct {
	store[v1alpha1.Function, *v1alpha1.Function, v1alpha1.FunctionList, *v1alpha1.FunctionList, api.FunctionSpec, api.Function]
}

func (s functionStore) Create(ctx context.Context, ns, name string, spec api.FunctionSpec) (api.Function, error) {
	if err := s.checkTraffic(ctx, ns, name, spec); err != nil {
		return api.Function{}, err
	}
	return s.store.Create(ctx, ns, name, spec)
}

func (s functionStore) Update(ctx context.Context, ns, name string, mutate func(*api.FunctionSpec) error) (api.Function, error) {
	return s.store.Update(ctx, ns, name, func(spec *api.FunctionSpec) error {
		if err := mutate(spec); err != nil {
			return err
		}
		return s.checkTraffic(ctx, ns, name, *spec)
	})
}

func (s functionStore) checkTraffic(ctx context.Context, ns, name string, spec api.FunctionSpec) error {
	if !slices.ContainsFunc(spec.Traffic, func(t api.TrafficTarget) bool { return t.Revision != "" }) {
		return nil
	}
	revs, err := s.b.revisions(ctx, ns, name)
	if err != nil {
		return err
	}
	states := make([]rules.RevisionState, len(revs))
	for i, r := range revs {
		states[i] = rules.RevisionState{Name: r.Name, Number: r.Spec.Number, Phase: string(r.Status.Phase)}
	}
	if ferr := rules.CheckTrafficRevisions(spec.Traffic, states); ferr != nil {
		return &backend.InvalidError{Field: ferr.Field, Reason: ferr.Reason}
	}
	return nil
}

func (b *Backend) Triggers() backend.Store[api.Trigger, api.TriggerSpec] {
	return store[v1alpha1.Trigger, *v1alpha1.Trigger, v1alpha1.TriggerList, *v1alpha1.TriggerList, api.TriggerSpec, api.Trigger]{b, triggerKind}
}

func (b *Backend) Secrets() backend.Store[api.Secret, api.SecretSpec] {
	return store[corev1.Secret, *corev1.Secret, corev1.SecretList, *corev1.SecretList, api.SecretSpec, api.Secret]{b, secretKind}
}

// Revisions lists a function's revisions, oldest first, with their share of its traffic.
func (b *Backend) Revisions(ctx context.Context, ns, function string) ([]api.Revision, error) {
	var fn v1alpha1.Function
	if err := b.get(ctx, "function", ns, function, &fn); err != nil {
		return nil, err
	}
	revs, err := b.revisions(ctx, ns, function)
	if err != nil {
		return nil, err
	}
	traffic := v1alpha1.ResolvedRules(fn.Status.Traffic)
	out := make([]api.Revision, 0, len(revs))
	for i := range revs {
		if metav1.IsControlledBy(&revs[i], &fn) {
			out = append(out, revisionOf(&revs[i], traffic))
		}
	}
	return out, nil
}

// revisions reads the Revisions of a function, oldest first.
func (b *Backend) revisions(ctx context.Context, ns, function string) ([]v1alpha1.Revision, error) {
	var list v1alpha1.RevisionList
	if err := b.client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{scaling.LabelFunction: function}); err != nil {
		return nil, fmt.Errorf("list revisions of function %s in %s: %w", function, ns, err)
	}
	slices.SortFunc(list.Items, func(x, y v1alpha1.Revision) int { return cmp.Compare(x.Spec.Number, y.Spec.Number) })
	return list.Items, nil
}

func (b *Backend) Jobs() backend.Store[api.Job, api.JobSpec] {
	return store[v1alpha1.FunctionJob, *v1alpha1.FunctionJob, v1alpha1.FunctionJobList, *v1alpha1.FunctionJobList, api.JobSpec, api.Job]{b, jobKind}
}

// List lists the namespace's objects, sorted by name.
func (s store[T, PT, L, PL, S, O]) List(ctx context.Context, ns string) ([]O, error) {
	var list L
	if err := s.b.client.List(ctx, PL(&list), client.InNamespace(ns), client.MatchingLabels(s.k.selector)); err != nil {
		return nil, fmt.Errorf("list %ss in %s: %w", s.k.name, ns, err)
	}
	items := s.k.items(&list)
	slices.SortFunc(items, func(x, y T) int { return strings.Compare(PT(&x).GetName(), PT(&y).GetName()) })
	out := make([]O, len(items))
	for i := range items {
		out[i] = s.k.view(&items[i])
	}
	return out, nil
}

func (s store[T, PT, L, PL, S, O]) Get(ctx context.Context, ns, name string) (O, error) {
	var obj T
	if err := s.get(ctx, ns, name, &obj); err != nil {
		var zero O
		return zero, err
	}
	return s.k.view(&obj), nil
}

// get reads one of the kind's objects; one of the same API kind that is not the kind's is
// not found.
func (s store[T, PT, L, PL, S, O]) get(ctx context.Context, ns, name string, obj *T) error {
	if err := s.b.get(ctx, s.k.name, ns, name, PT(obj)); err != nil {
		return err
	}
	if !s.k.owns(PT(obj)) {
		return &backend.NotFoundError{Kind: s.k.name, Namespace: ns, Name: name}
	}
	return nil
}

func (s store[T, PT, L, PL, S, O]) Create(ctx context.Context, ns, name string, spec S) (O, error) {
	var obj T
	PT(&obj).SetNamespace(ns)
	PT(&obj).SetName(name)
	var zero O
	if err := s.k.apply(&obj, spec); err != nil {
		return zero, err
	}
	if err := s.b.create(ctx, s.k.name, PT(&obj)); err != nil {
		return zero, err
	}
	return s.k.view(&obj), nil
}

func (s store[T, PT, L, PL, S, O]) Update(ctx context.Context, ns, name string, mutate func(*S) error) (O, error) {
	var obj T
	err := s.b.update(ctx, s.k.name, ns, name, PT(&obj), func() error {
		if !s.k.owns(PT(&obj)) {
			return &backend.NotFoundError{Kind: s.k.name, Namespace: ns, Name: name}
		}
		spec := s.k.spec(s.k.view(&obj))
		if err := mutate(&spec); err != nil {
			return err
		}
		return s.k.apply(&obj, spec)
	})
	if err != nil {
		var zero O
		return zero, err
	}
	return s.k.view(&obj), nil
}

func (s store[T, PT, L, PL, S, O]) Delete(ctx context.Context, ns, name string) error {
	var obj T
	if s.k.selector != nil {
		if err := s.get(ctx, ns, name, &obj); err != nil {
			return err
		}
		// Only the object just read (its UID), never one of another owner created since.
		return mapError(s.b.client.Delete(ctx, PT(&obj), client.Preconditions{UID: ptr.To(PT(&obj).GetUID())}), s.k.name, ns, name)
	}
	return s.b.delete(ctx, s.k.name, ns, name, PT(&obj))
}
