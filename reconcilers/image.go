package reconcilers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/imagepolicy"
)

// DefaultSkipTagResolution are the registries whose images are run as given, without
// resolving their tag (Knative's registries-skipping-tag-resolving default): the names ko
// and kind use for images loaded straight into the nodes, which no registry serves.
var DefaultSkipTagResolution = []string{"kind.local", "ko.local", "dev.local"}

// DefaultAllowedRegistries are the registries prebuilt images may come from besides a
// tenant's own images in the platform registry: only the names of images loaded straight
// into the nodes (DefaultSkipTagResolution), which no registry serves and no pull secret
// goes with; a cluster that loads them (kind, ko) keeps working.
var DefaultAllowedRegistries = slices.Clone(DefaultSkipTagResolution)

// resolveTimeout bounds one tag-to-digest resolution, so an unreachable registry holds a
// reconcile worker for at most this long.
const resolveTimeout = 10 * time.Second

// resolver turns a prebuilt image's tag into its digest (Knative's tag-to-digest
// resolution): the Deployment then runs exactly the image that was found, and an image no
// registry serves is known at once, before any pod tries to pull it.
type resolver struct {
	policy    imagepolicy.Policy
	skip      []string // registries (host[:port] as in the reference) left as given
	insecure  []string // registries spoken to over plain HTTP
	keychain  authn.Keychain
	transport http.RoundTripper
}

func newResolver(cfg Config) (resolver, error) {
	kc := cfg.Keychain
	if kc == nil {
		// Anonymous, unless the operator's pod has a Docker config ($DOCKER_CONFIG).
		kc = authn.DefaultKeychain
	}
	p, err := imagepolicy.New(cfg.Options.Build.Registry, cfg.AllowedRegistries)
	if err != nil {
		return resolver{}, err
	}
	return resolver{policy: p, skip: cfg.SkipTagResolution, insecure: cfg.Options.Build.InsecureRegistries, keychain: kc, transport: p.Transport()}, nil
}

// errBadReference is an image reference that no registry call could fix.
var errBadReference = errors.New("not a valid image reference")

// parse reads image, to be run in namespace; local says why it needs no registry call (""
// when it does). An image the policy refuses is an *imagepolicy.Refusal, decided without a
// registry call.
func (r resolver) parse(image, namespace string) (ref name.Reference, local string, err error) {
	ref, err = name.ParseReference(image)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", errBadReference, err)
	}
	if err := r.policy.Check(ref, namespace); err != nil {
		return nil, "", err
	}
	registry := ref.Context().RegistryStr()
	if slices.Contains(r.insecure, registry) {
		if ref, err = name.ParseReference(image, name.Insecure); err != nil {
			return nil, "", fmt.Errorf("%w: %w", errBadReference, err)
		}
	}
	switch _, byDigest := ref.(name.Digest); {
	case byDigest:
		return ref, "given by digest", nil
	case slices.Contains(r.skip, registry):
		return ref, "registry " + registry + " skips tag resolution", nil
	}
	return ref, "", nil
}

// allowed reports whether the policy lets namespace run image (as status.image records it).
func (r resolver) allowed(image, namespace string) bool {
	ref, err := name.ParseReference(image)
	return err == nil && r.policy.Check(ref, namespace) == nil
}

// resolve asks ref's registry for the digest its tag points at, as <repository>@sha256:….
// Its error is for imagepolicy.Describe only: its text may hold what the registry sent.
func (r resolver) resolve(ctx context.Context, ref name.Reference) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(r.keychain), remote.WithTransport(r.transport)}
	desc, err := remote.Head(ref, opts...)
	if err != nil {
		// Serves the registries that answer HEAD without a digest.
		d, gerr := remote.Get(ref, opts...)
		if gerr != nil {
			return "", gerr
		}
		desc = &d.Descriptor
	}
	return ref.Context().Name() + "@" + desc.Digest.String(), nil
}

// resolvedMessage is the Built message of a resolved spec.image. It is also the record that
// status.image is the digest of this very spec.image: while it stands, the registry is not
// asked again.
func resolvedMessage(specImage, image string) string {
	return "resolved " + specImage + " to " + image
}

// prebuiltImage settles status.image and Built for spec.image: its tag resolved to a digest,
// kept for as long as spec.image stays the same, so the steady state makes no registry call.
// An image given by digest or from a registry that skips resolution runs as given. An image
// the policy refuses is Built False with no registry call. An image that cannot be fetched is
// Built False (Ready False) and asked again every registryRetryDelay; meanwhile the previous
// image, if any and if still allowed, keeps serving.
func (r *FunctionReconciler) prebuiltImage(ctx context.Context, fn *v1.Function) error {
	st, gen := &fn.Status, fn.Generation
	spec := fn.Spec.Image
	built := func(status metav1.ConditionStatus, reason, msg string) {
		st.MarkCondition(gen, v1.ConditionBuilt, status, reason, msg)
	}
	ref, local, err := r.resolver.parse(spec, fn.Namespace)
	var refusal *imagepolicy.Refusal
	switch {
	case errors.As(err, &refusal):
		if st.Image != "" && !r.resolver.allowed(st.Image, fn.Namespace) {
			// Recorded before the policy refused it (an upgrade, a narrowed list): stop it.
			st.Image = ""
			if err := r.deleteDeployment(ctx, fn); err != nil {
				return err
			}
		}
		built(metav1.ConditionFalse, v1.ReasonImageNotAllowed, "spec.image "+spec+" is not allowed: "+refusal.Error())
		return nil // only a new spec.image (or policy) helps
	case err != nil:
		built(metav1.ConditionFalse, v1.ReasonImageUnresolvable, "spec.image "+spec+" is "+err.Error())
		return nil
	}
	if local != "" {
		st.Image, st.BuiltSHA256, st.LastBuildError = spec, "", ""
		built(metav1.ConditionTrue, v1.ReasonPrebuilt, "runs spec.image as given: "+local)
		return nil
	}
	if c := meta.FindStatusCondition(st.Conditions, v1.ConditionBuilt); c != nil && c.Status == metav1.ConditionTrue &&
		c.Reason == v1.ReasonPrebuilt && st.Image != "" && c.Message == resolvedMessage(spec, st.Image) {
		built(metav1.ConditionTrue, v1.ReasonPrebuilt, c.Message) // the current generation
		return nil
	}
	image, err := r.resolver.resolve(ctx, ref)
	if err != nil {
		why := imagepolicy.Describe(err, ref)
		log.FromContext(ctx).Info("cannot resolve the image's tag", "image", spec, "reason", why)
		built(metav1.ConditionFalse, v1.ReasonImageUnresolvable, "cannot fetch image "+spec+" from its registry: "+why+
			"; check the name and tag, or the registry's reachability (retried every "+registryRetryDelay.String()+")")
		return retryAfter(registryRetryDelay)
	}
	log.FromContext(ctx).Info("resolved the image's tag", "image", spec, "digest", image)
	st.Image, st.BuiltSHA256, st.LastBuildError = image, "", ""
	built(metav1.ConditionTrue, v1.ReasonPrebuilt, resolvedMessage(spec, image))
	return nil
}

// deleteDeployment removes fn's Deployment, if fn controls it.
func (r *FunctionReconciler) deleteDeployment(ctx context.Context, fn *v1.Function) error {
	dep := &appsv1.Deployment{}
	if err := r.Get(ctx, client.ObjectKeyFromObject(fn), dep); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(dep, fn) {
		return nil
	}
	log.FromContext(ctx).Info("deleting the Deployment of an image the policy refuses", "deployment", dep.Name)
	if err := r.Delete(ctx, dep); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting deployment %s/%s: %w", dep.Namespace, dep.Name, err)
	}
	return nil
}
