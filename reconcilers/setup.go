package reconcilers

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-containerregistry/pkg/authn"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	ctrl "sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/history"
	"sless.dev/sless/scaling"
	"sless.dev/sless/triggers"
)

// The operator's metrics endpoint asks the API server who its callers are and whether they
// may get /metrics (cmd/sless/operator.go, metricsOptions).
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// ArtifactDeleter removes a function's uploaded sources; buildkit.Artifacts implements it
// over S3 or the local filesystem.
type ArtifactDeleter interface {
	DeleteFunction(ctx context.Context, namespace, name string) error
}

// Config is what every reconciler shares.
type Config struct {
	Options   scaling.Options
	Artifacts ArtifactDeleter
	// Workers is the number of objects of one kind reconciled at once (default 4).
	Workers int
	// SkipTagResolution are the registries (host[:port], as in image references) whose
	// prebuilt images run as given, their tags not resolved to digests: images no registry
	// serves (DefaultSkipTagResolution), or private ones the operator has no credentials for.
	SkipTagResolution []string
	// AllowedRegistries are the registries (host[:port][/path]) prebuilt images may come from
	// besides the namespace's own images under Options.Build.Registry (always allowed; other
	// namespaces' images there never are). Nil allows none (DefaultAllowedRegistries is the
	// operator's default). Their hosts are dialed whatever they resolve to; any other host a
	// resolution leads to must be on a public address.
	AllowedRegistries []string
	// Keychain gives the credentials tags are resolved with (nil: authn.DefaultKeychain,
	// anonymous unless the operator has a Docker config). Registries listed in
	// Options.Build.InsecureRegistries are asked over plain HTTP.
	Keychain authn.Keychain
	// History is the invocation history health-gated rollouts are judged by; nil holds
	// every rollout at its step.
	History RevisionOutcomes
}

// RevisionOutcomes counts a revision's calls and failures since a time (history.Reader).
type RevisionOutcomes interface {
	RevisionOutcomes(ctx context.Context, ns, function, revision string, since time.Time) (history.Summary, error)
}

// functionRefIndex indexes Triggers and FunctionJobs by the Function they reference, so a
// Function change wakes exactly its dependents; without it they wait for a resync.
const functionRefIndex = "spec.functionRef.name"

// triggerSecretIndex indexes Triggers by the secrets their kind reads (an event trigger's
// broker secret), so a secret's creation or rotation wakes them.
const triggerSecretIndex = "trigger.secrets"

// specChanged lets through what the user changed (spec, labels, annotations, deletion, which
// all bump the generation or metadata) but not the status writes a reconciler makes itself:
// those would only cost another no-op reconcile.
var specChanged = predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{})

// notCreated drops the create events of children and build Jobs: the reconciler made them
// and already knows; updates (drift, Job completion) and deletions still wake it.
var notCreated = predicate.Funcs{CreateFunc: func(event.CreateEvent) bool { return false }}

// finalizer guards cleanup that owner references cannot do: uploaded artifacts and build
// Jobs in the platform namespace.
const finalizer = "sless.dev/cleanup"

// Setup registers the field indexes and the three reconcilers with mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, cfg Config) error {
	if err := cfg.Options.Validate(); err != nil {
		return err
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &v1.Trigger{}, functionRefIndex, func(o client.Object) []string {
		return []string{o.(*v1.Trigger).Spec.FunctionRef.Name}
	}); err != nil {
		return fmt.Errorf("index triggers by function: %w", err)
	}
	if err := idx.IndexField(ctx, &v1.FunctionJob{}, functionRefIndex, func(o client.Object) []string {
		if ref := o.(*v1.FunctionJob).Spec.FunctionRef; ref != nil {
			return []string{ref.Name}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("index function jobs by function: %w", err)
	}
	if err := idx.IndexField(ctx, &v1.Trigger{}, triggerSecretIndex, func(o client.Object) []string {
		var names []string
		for _, r := range triggers.SecretRefs(triggers.FromCRD(o.(*v1.Trigger).Spec)) {
			names = append(names, r.Secret)
		}
		return names
	}); err != nil {
		return fmt.Errorf("index triggers by secret: %w", err)
	}
	if err := idx.IndexField(ctx, &v1.Function{}, secretRefIndex, func(o client.Object) []string {
		return o.(*v1.Function).Spec.SecretNames()
	}); err != nil {
		return fmt.Errorf("index functions by secret: %w", err)
	}
	kids := newChildren(mgr.GetClient())
	b := newBuilds(mgr.GetClient(), mgr.GetAPIReader(), kids, cfg.Options)
	res, err := newResolver(cfg)
	if err != nil {
		return err
	}
	if err := (&FunctionReconciler{Client: mgr.GetClient(), Config: cfg, builds: b, children: kids, resolver: res, Recorder: mgr.GetEventRecorder("sless-operator")}).SetupWithManager(mgr); err != nil {
		return err
	}
	warm := newWarmers(ctx, cfg.Options.InterceptorURL, slog.New(logr.ToSlogHandler(mgr.GetLogger().WithName("prewarm"))))
	if err := (&TriggerReconciler{Client: mgr.GetClient(), Config: cfg, warm: warm, children: kids}).SetupWithManager(mgr); err != nil {
		return err
	}
	return (&FunctionJobReconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Config: cfg, builds: b, policy: res.policy, children: kids}).SetupWithManager(mgr)
}

// referrers maps an object to the requests of the objects of newList's kind in its namespace
// whose index field holds its name: a Function's triggers and jobs, a Secret's functions and
// event triggers. A change to it wakes exactly those.
func referrers(c client.Client, newList func() client.ObjectList, field string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		list := newList()
		if err := c.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingFields{field: o.GetName()}); err != nil {
			return nil
		}
		var reqs []reconcile.Request
		_ = meta.EachListItem(list, func(item runtime.Object) error {
			obj := item.(client.Object)
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}})
			return nil
		})
		return reqs
	}
}

// ControllerConfig is the controller configuration the operator's manager runs with:
// client-go's rate-limited workqueue instead of controller-runtime's priority queue (its
// default since v0.23), which can lose a RequeueAfter (a Function left waiting, every
// worker idle).
func ControllerConfig() config.Controller {
	return config.Controller{UsePriorityQueue: ptr.To(false)}
}
