package reconcilers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1 "sless.dev/sless/apis/v1alpha1"
)

// DefaultSkipTagResolution are the registries whose images are run as given, without
// resolving their tag (Knative's registries-skipping-tag-resolving default): the names ko
// and kind use for images loaded straight into the nodes, which no registry serves.
var DefaultSkipTagResolution = []string{"kind.local", "ko.local", "dev.local"}

// resolveTimeout bounds one tag-to-digest resolution, so an unreachable registry holds a
// reconcile worker for at most this long.
const resolveTimeout = 10 * time.Second

// resolver turns a prebuilt image's tag into its digest (Knative's tag-to-digest
// resolution): the Deployment then runs exactly the image that was found, and an image no
// registry serves is known at once, before any pod tries to pull it.
type resolver struct {
	skip     []string // registries (host[:port] as in the reference) left as given
	insecure []string // registries spoken to over plain HTTP
	keychain authn.Keychain
}

func newResolver(cfg Config) resolver {
	kc := cfg.Keychain
	if kc == nil {
		// Anonymous, unless the operator's pod has a Docker config ($DOCKER_CONFIG).
		kc = authn.DefaultKeychain
	}
	return resolver{skip: cfg.SkipTagResolution, insecure: cfg.Options.Build.InsecureRegistries, keychain: kc}
}

// errBadReference is an image reference that no registry call could fix.
var errBadReference = errors.New("not a valid image reference")

// parse reads image; local says why it needs no registry call ("" when it does).
func (r resolver) parse(image string) (ref name.Reference, local string, err error) {
	ref, err = name.ParseReference(image)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", errBadReference, err)
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

// resolve asks ref's registry for the digest its tag points at, as <repository>@sha256:….
func (r resolver) resolve(ctx context.Context, ref name.Reference) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(r.keychain)}
	desc, err := remote.Head(ref, opts...)
	if err != nil {
		// A HEAD answer has no body: GET says why (MANIFEST_UNKNOWN, UNAUTHORIZED, …), and
		// serves the registries that answer HEAD without a digest.
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
// that cannot be fetched is Built False (Ready False) and asked again every
// registryRetryDelay; meanwhile the previous image, if any, keeps serving.
func (r *FunctionReconciler) prebuiltImage(ctx context.Context, fn *v1.Function) error {
	st, gen := &fn.Status, fn.Generation
	spec := fn.Spec.Image
	built := func(status metav1.ConditionStatus, reason, msg string) {
		st.MarkCondition(gen, v1.ConditionBuilt, status, reason, msg)
	}
	ref, local, err := r.resolver.parse(spec)
	if err != nil {
		built(metav1.ConditionFalse, v1.ReasonImageUnresolvable, "spec.image "+spec+" is "+err.Error())
		return nil // only a new spec.image helps
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
		log.FromContext(ctx).Info("cannot resolve the image's tag", "image", spec, "err", err.Error())
		built(metav1.ConditionFalse, v1.ReasonImageUnresolvable, "cannot fetch image "+spec+" from its registry: "+err.Error()+
			"; check the name and tag, or the registry's reachability (retried every "+registryRetryDelay.String()+")")
		return retryAfter(registryRetryDelay)
	}
	log.FromContext(ctx).Info("resolved the image's tag", "image", spec, "digest", image)
	st.Image, st.BuiltSHA256, st.LastBuildError = image, "", ""
	built(metav1.ConditionTrue, v1.ReasonPrebuilt, resolvedMessage(spec, image))
	return nil
}
