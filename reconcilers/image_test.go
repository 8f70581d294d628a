package reconcilers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/reconcilers"
)

// ggcrRegistry is go-containerregistry's in-memory registry, served by TestMain.
var ggcrRegistry = registry.New(registry.Logger(log.New(io.Discard, "", 0)))

// pushImage pushes a random image to repoTag (<repo>:<tag>) in the test registry and
// returns the reference by digest the operator should resolve it to.
func pushImage(t *testing.T, repoTag string) string {
	t.Helper()
	ref, err := name.ParseReference(testRegistry + "/" + repoTag)
	if err != nil {
		t.Fatal(err)
	}
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return ref.Context().Name() + "@" + d.String()
}

// registryCalls counts the test registry's requests about repo.
func registryCalls(repo string) int {
	registryMu.Lock()
	defer registryMu.Unlock()
	n := 0
	for _, p := range registryPaths {
		if strings.HasPrefix(p, "/v2/"+repo+"/") {
			n++
		}
	}
	return n
}

func prebuiltFunction(ns, name, image string) *v1.Function {
	fn := newFunction(ns, name, "0")
	fn.Spec.Source, fn.Spec.Image = nil, image
	return fn
}

func builtCondition(t *testing.T, fn *v1.Function) *metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(fn.Status.Conditions, v1.ConditionBuilt)
	if c == nil {
		t.Fatalf("no Built condition: %+v", fn.Status.Conditions)
	}
	return c
}

// deploymentImage is the image the Deployment of fn's latest ready revision runs.
func deploymentImage(t *testing.T, fn *v1.Function) string {
	t.Helper()
	dep := &appsv1.Deployment{}
	if err := get(t, client.ObjectKey{Namespace: fn.Namespace, Name: fn.Status.LatestReadyRevision}, dep); err != nil {
		t.Fatal(err)
	}
	return dep.Spec.Template.Spec.Containers[0].Image
}

// TestPrebuiltTagResolvesToDigest: spec.image's tag is resolved to its digest once, the
// Deployment runs by digest, and the registry is not asked again until spec.image changes.
func TestPrebuiltTagResolvesToDigest(t *testing.T) {
	ns := newNamespace(t)
	repo := ns + "/app"
	want := pushImage(t, repo+":1.0")
	spec := testRegistry + "/" + repo + ":1.0"
	fn := prebuiltFunction(ns, "tagged", spec)
	create(t, fn)
	got := waitFunction(t, fn, v1.FunctionReady)
	if got.Status.Image != want || got.Spec.Image != spec {
		t.Errorf("status.image %q spec.image %q, want %q and the spec untouched", got.Status.Image, got.Spec.Image, want)
	}
	if c := builtCondition(t, got); c.Reason != v1.ReasonPrebuilt || !strings.Contains(c.Message, want) {
		t.Errorf("Built %+v, want Prebuilt naming %s", c, want)
	}
	if img := deploymentImage(t, got); img != want {
		t.Errorf("deployment runs %q, want %q", img, want)
	}

	// Steady state: a reconcile (woken by a Deployment change) asks no registry, writes nothing.
	time.Sleep(time.Second)
	calls, version := registryCalls(repo), got.ResourceVersion
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: got.Status.LatestReadyRevision}}
	update(t, dep, func() { metav1.SetMetaDataAnnotation(&dep.ObjectMeta, "touched", "yes") })
	time.Sleep(2 * time.Second)
	if err := get(t, client.ObjectKeyFromObject(fn), got); err != nil {
		t.Fatal(err)
	}
	if n := registryCalls(repo); n != calls || got.ResourceVersion != version {
		t.Errorf("steady state: %d registry calls (had %d), function version %s (had %s)", n, calls, got.ResourceVersion, version)
	}

	// Another spec change keeps the digest of the same spec.image.
	update(t, got, func() { got.Spec.Env = map[string]string{"GREETING": "hi"} })
	got = waitFunction(t, got, v1.FunctionReady)
	if n := registryCalls(repo); n != calls || got.Status.Image != want {
		t.Errorf("after an env change: %d registry calls (had %d), image %s", n, calls, got.Status.Image)
	}

	// A new spec.image is resolved again.
	want2 := pushImage(t, repo+":2.0")
	update(t, got, func() { got.Spec.Image = testRegistry + "/" + repo + ":2.0" })
	got = waitFunction(t, got, v1.FunctionReady)
	if img := deploymentImage(t, got); got.Status.Image != want2 || img != want2 {
		t.Errorf("status.image %s, deployment %s, want %s", got.Status.Image, img, want2)
	}
}

// TestMissingTagIsNotReadyUntilPushed: a tag no registry serves is Built False, never a
// silent Ready (no pod exists at min_replicas 0 to report it), and resolves on a timed retry
// once pushed.
func TestMissingTagIsNotReadyUntilPushed(t *testing.T) {
	defer func(d time.Duration) { *reconcilers.RegistryRetryDelay = d }(*reconcilers.RegistryRetryDelay)
	*reconcilers.RegistryRetryDelay = time.Second
	ns := newNamespace(t)
	repo := ns + "/late"
	spec := testRegistry + "/" + repo + ":1"
	fn := prebuiltFunction(ns, "late", spec)
	create(t, fn)
	got := waitFunction(t, fn, v1.FunctionFailed)
	ready := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReady)
	if ready.Reason != v1.ReasonImageUnresolvable || !strings.Contains(ready.Message, "cannot fetch image "+spec) ||
		!strings.Contains(ready.Message, "registry "+testRegistry+" answered 404 for "+repo+":1") {
		t.Errorf("Ready %+v, want %s naming the image, the registry and its status", ready, v1.ReasonImageUnresolvable)
	}
	if strings.Contains(ready.Message, "MANIFEST_UNKNOWN") {
		t.Errorf("Ready %q copies the registry's answer", ready.Message)
	}
	t.Logf("Ready: %s", ready.Message)
	if c := builtCondition(t, got); c.Status != metav1.ConditionFalse || c.Reason != v1.ReasonImageUnresolvable {
		t.Errorf("Built %+v", c)
	}
	if got.Status.Image != "" {
		t.Errorf("status.image %q for an image that cannot be fetched", got.Status.Image)
	}
	if n := len(deployments(t, ns)); n != 0 {
		t.Errorf("%d Deployments for an image that cannot be fetched", n)
	}
	want := pushImage(t, repo+":1")
	// No spec change: only the timed retry can notice.
	got = waitFunction(t, fn, v1.FunctionReady)
	if got.Status.Image != want {
		t.Errorf("status.image %q, want %q", got.Status.Image, want)
	}
}

// TestImageByDigestMakesNoRegistryCall: an image given by digest is already what the
// resolution would give; the registry (where it does not even exist) is not asked.
func TestImageByDigestMakesNoRegistryCall(t *testing.T) {
	ns := newNamespace(t)
	repo := ns + "/pinned"
	spec := testRegistry + "/" + repo + "@sha256:" + sha("c")
	fn := prebuiltFunction(ns, "pinned", spec)
	create(t, fn)
	got := waitFunction(t, fn, v1.FunctionReady)
	if got.Status.Image != spec || deploymentImage(t, got) != spec {
		t.Errorf("status.image %q, want %q as given", got.Status.Image, spec)
	}
	if n := registryCalls(repo); n != 0 {
		t.Errorf("%d registry calls for an image given by digest", n)
	}
}

// leaksNothing fails the test if the internal service's answer reached fn's status or any
// Event in its namespace.
func leaksNothing(t *testing.T, fn client.Object) {
	t.Helper()
	if err := get(t, client.ObjectKeyFromObject(fn), fn); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(fn)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), internalSecret) {
		t.Errorf("the internal service's answer is in %s: %s", fn.GetName(), b)
	}
	var l eventsv1.EventList
	if err := env.Client.List(context.Background(), &l, client.InNamespace(fn.GetNamespace())); err != nil {
		t.Fatal(err)
	}
	for _, e := range l.Items {
		if strings.Contains(e.Note, internalSecret) {
			t.Errorf("the internal service's answer is in Event %s: %s", e.Reason, e.Note)
		}
	}
}

func internalHost() string { return strings.TrimPrefix(internalURL, "http://") }

// TestImageOnDisallowedRegistryIsRefusedUnasked: spec.image on a registry the operator does
// not allow — here an internal loopback service — is Built False/ImageNotAllowed naming the
// registry and the flag, decided without a single request to it; nothing it could say
// reaches the status or an Event. A self-contained job with that image does not run.
func TestImageOnDisallowedRegistryIsRefusedUnasked(t *testing.T) {
	ns := newNamespace(t)
	hits := internalHits.Load()
	spec := internalHost() + "/x:y"
	fn := prebuiltFunction(ns, "ssrf", spec)
	create(t, fn)
	got := waitFunction(t, fn, v1.FunctionFailed)
	c := builtCondition(t, got)
	if c.Status != metav1.ConditionFalse || c.Reason != v1.ReasonImageNotAllowed ||
		!strings.Contains(c.Message, "registry "+internalHost()+" is not allowed") || !strings.Contains(c.Message, "--allowed-registries") {
		t.Errorf("Built %+v, want %s naming the registry and --allowed-registries", c, v1.ReasonImageNotAllowed)
	}
	t.Logf("Built: %s", c.Message)
	if got.Status.Image != "" {
		t.Errorf("status.image %q", got.Status.Image)
	}
	if n := len(deployments(t, ns)); n != 0 {
		t.Errorf("%d Deployments for a refused image", n)
	}

	fj := createJob(t, ns, "ssrf-job", v1.FunctionJobSpec{CodeSpec: v1.CodeSpec{Runtime: v1.RuntimeGo123, Image: spec}, RunID: 1})
	job := waitJobPhase(t, fj, v1.JobFailed, 1)
	if c := meta.FindStatusCondition(job.Status.Conditions, v1.ConditionSucceeded); c == nil || c.Reason != v1.ReasonImageNotAllowed {
		t.Errorf("job Succeeded %+v, want %s", c, v1.ReasonImageNotAllowed)
	}
	var runs batchv1.JobList
	if err := env.Client.List(context.Background(), &runs, client.InNamespace(ns)); err != nil || len(runs.Items) != 0 {
		t.Errorf("run Jobs for a refused image: %d (%v)", len(runs.Items), err)
	}

	time.Sleep(time.Second) // a late request would show here
	if n := internalHits.Load() - hits; n != 0 {
		t.Errorf("%d requests reached the internal service", n)
	}
	leaksNothing(t, got)
	leaksNothing(t, job)
}

// TestOtherTenantsImageIsRefused: a tenant cannot name another tenant's image in the
// platform registry (the platform's pull secret would fetch it); its own still runs.
func TestOtherTenantsImageIsRefused(t *testing.T) {
	victim, attacker := newNamespace(t), newNamespace(t)
	digest := pushImage(t, victim+"/private:1")
	for name, spec := range map[string]string{"by-tag": testRegistry + "/" + victim + "/private:1", "by-digest": digest} {
		calls := registryCalls(victim + "/private")
		fn := prebuiltFunction(attacker, name, spec)
		create(t, fn)
		got := waitFunction(t, fn, v1.FunctionFailed)
		if c := builtCondition(t, got); c.Reason != v1.ReasonImageNotAllowed || !strings.Contains(c.Message, "outside namespace "+attacker+"'s images") {
			t.Errorf("%s: Built %+v, want %s", spec, c, v1.ReasonImageNotAllowed)
		}
		if got.Status.Image != "" {
			t.Errorf("%s: status.image %q", spec, got.Status.Image)
		}
		if n := registryCalls(victim + "/private"); n != calls {
			t.Errorf("%s: %d registry calls about the victim's repository", spec, n-calls)
		}
	}
	fj := createJob(t, attacker, "steal-job", v1.FunctionJobSpec{CodeSpec: v1.CodeSpec{Runtime: v1.RuntimeGo123, Image: digest}, RunID: 1})
	if c := meta.FindStatusCondition(waitJobPhase(t, fj, v1.JobFailed, 1).Status.Conditions, v1.ConditionSucceeded); c == nil || c.Reason != v1.ReasonImageNotAllowed {
		t.Errorf("job Succeeded %+v, want %s", c, v1.ReasonImageNotAllowed)
	}

	own := prebuiltFunction(victim, "own", testRegistry+"/"+victim+"/private:1")
	create(t, own)
	if got := waitFunction(t, own, v1.FunctionReady); got.Status.Image != digest {
		t.Errorf("own image: status.image %q, want %q", got.Status.Image, digest)
	}
}

// TestRedirectToInternalServiceIsRefused: an allowed registry (here the platform's) that
// redirects the manifest request to a loopback service nobody allowed does not get the
// operator to ask it: the dial is refused and said so in fixed words.
func TestRedirectToInternalServiceIsRefused(t *testing.T) {
	ns := newNamespace(t)
	hits := internalHits.Load()
	spec := testRegistry + "/" + ns + "/" + redirectedRepo + "/app:1"
	fn := prebuiltFunction(ns, "redirected", spec)
	create(t, fn)
	got := waitFunction(t, fn, v1.FunctionFailed)
	c := builtCondition(t, got)
	if c.Reason != v1.ReasonImageUnresolvable || !strings.Contains(c.Message, "refused to connect") || strings.Contains(c.Message, internalHost()) {
		t.Errorf("Built %+v, want %s saying the connection was refused", c, v1.ReasonImageUnresolvable)
	}
	t.Logf("Built: %s", c.Message)
	if n := internalHits.Load() - hits; n != 0 {
		t.Errorf("%d requests reached the internal service", n)
	}
	if registryCalls(ns+"/"+redirectedRepo) == 0 {
		t.Error("the registry was not asked: the redirect was not under test")
	}
	leaksNothing(t, got)
}

// TestRefusedImageAlreadyRunningIsStopped: a status.image recorded before the policy refused
// it (another tenant's image, resolved by an operator without the policy) never runs: it is
// cleared, the revision of the refused spec fails, and only the revision that was ready
// before (its own image) keeps serving.
func TestRefusedImageAlreadyRunningIsStopped(t *testing.T) {
	victim, attacker := newNamespace(t), newNamespace(t)
	digest := pushImage(t, victim+"/private:1")
	fn := prebuiltFunction(attacker, "legacy", "ko.local/legacy:1")
	create(t, fn)
	got := waitFunction(t, fn, v1.FunctionReady)
	// What an operator without the policy recorded, then the next spec change.
	got.Status.Image = digest
	if err := env.Client.Status().Update(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	update(t, got, func() { got.Spec.Image = testRegistry + "/" + victim + "/private:1" })
	got = waitFunction(t, got, v1.FunctionFailed)
	if c := builtCondition(t, got); c.Reason != v1.ReasonImageNotAllowed || got.Status.Image != "" {
		t.Errorf("Built %+v, status.image %q, want %s and no image", c, got.Status.Image, v1.ReasonImageNotAllowed)
	}
	eventually(t, "the refused spec's revision failed", func() error {
		rev := &v1.Revision{}
		if err := get(t, revisionKey(fn, 2), rev); err != nil {
			return err
		}
		if rev.Status.Phase != "failed" || !strings.Contains(rev.Status.Message, "is not allowed") {
			return fmt.Errorf("revision 2 %+v", rev.Status)
		}
		return nil
	})
	for _, d := range deployments(t, attacker) {
		if img := d.Spec.Template.Spec.Containers[0].Image; img != "ko.local/legacy:1" {
			t.Errorf("Deployment %s runs %s", d.Name, img)
		}
	}
}

// deployments lists the Deployments of namespace ns.
func deployments(t *testing.T, ns string) []appsv1.Deployment {
	t.Helper()
	var l appsv1.DeploymentList
	if err := env.Client.List(context.Background(), &l, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return l.Items
}
