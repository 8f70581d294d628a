package reconcilers_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	httpv1alpha1 "github.com/kedacore/http-add-on/operator/apis/http/v1alpha1"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/reconcilers"
	"sless.dev/sless/scaling"
)

func TestFunctionBuildsThenDeploys(t *testing.T) {
	ns := newNamespace(t)
	fn := newFunction(ns, "hello", "a")
	create(t, fn)
	job := waitBuildJob(t, ns, "hello", "a")
	fetch, push := strings.Join(job.Spec.Template.Spec.InitContainers[0].Args, " "), strings.Join(job.Spec.Template.Spec.Containers[0].Args, " ")
	if !strings.Contains(fetch, "--key=contexts/"+ns+"/hello/1.tar.gz") || !strings.Contains(push, "--destination="+opts.Build.Registry+"/"+ns+"/hello:sha-"+sha("a")[:16]) {
		t.Errorf("the build fetches %q and pushes %q", fetch, push)
	}
	// What runs is the image the build pushed, by digest: a tag pushed over later does not
	// change it.
	wantImage := builtImage(t, job)
	building := waitFunction(t, fn, v1.FunctionBuilding)
	if c := meta.FindStatusCondition(building.Status.Conditions, v1.ConditionReady); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "Building" {
		t.Errorf("Ready while building = %+v", c)
	}

	finishJob(t, job, true, "")
	got := waitFunction(t, fn, v1.FunctionReady)
	if got.Status.Image != wantImage || got.Status.BuiltSHA256 != sha("a") || got.Status.LastBuildTime == nil {
		t.Errorf("status = %+v", got.Status)
	}
	if got.Status.URL != opts.GatewayURL+"/fn/"+ns+"/hello" || got.Status.RoutingHost != "hello."+ns+"."+opts.Domain {
		t.Errorf("url %q host %q", got.Status.URL, got.Status.RoutingHost)
	}
	for _, c := range got.Status.Conditions {
		if c.ObservedGeneration != got.Generation {
			t.Errorf("condition %s observedGeneration %d, generation %d", c.Type, c.ObservedGeneration, got.Generation)
		}
	}

	// The first revision snapshots the spec and owns what runs it, under its own host.
	key := revisionKey(got, 1)
	rev := &v1.Revision{}
	if err := get(t, key, rev); err != nil {
		t.Fatal(err)
	}
	if !metav1.IsControlledBy(rev, got) || rev.Spec.Function != "hello" || rev.Spec.Number != 1 || rev.Spec.Source.SHA256 != sha("a") ||
		rev.Status.Phase != "ready" || rev.Status.Image != wantImage || !rev.Status.Serving {
		t.Errorf("revision %+v owners %+v", rev, rev.OwnerReferences)
	}
	st := got.Status
	if st.LatestCreatedRevision != "hello-1" || st.LatestReadyRevision != "hello-1" || st.LastRevisionNumber != 1 ||
		len(st.Traffic) != 1 || st.Traffic[0] != (v1.ResolvedTrafficTarget{Revision: "hello-1", Latest: true, Percent: 100}) {
		t.Errorf("revisions in status: %+v", st)
	}
	for _, obj := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}, &httpv1alpha1.HTTPScaledObject{}} {
		if err := get(t, key, obj); err != nil {
			t.Fatalf("%T: %v", obj, err)
		}
		if !metav1.IsControlledBy(obj, rev) {
			t.Errorf("%T is not controlled by the revision: %+v", obj, obj.GetOwnerReferences())
		}
	}
	hso := &httpv1alpha1.HTTPScaledObject{}
	_ = get(t, key, hso)
	if hso.Spec.Hosts[0] != "hello-1."+ns+".rev."+opts.Domain {
		t.Errorf("revision host %v", hso.Spec.Hosts)
	}
	dep := &appsv1.Deployment{}
	_ = get(t, key, dep)
	if img := dep.Spec.Template.Spec.Containers[0].Image; img != wantImage {
		t.Errorf("deployment image %s", img)
	}
}

// TestSteadyStateMakesNoWrites proves there is no hot loop: once Ready, neither the function
// nor its children change while nothing else does (the Knative "steady state" row).
// functionEvents lists the reasons of the Events about fn, in the order they were recorded
// (type prefixed: "Normal/Built").
func functionEvents(t *testing.T, fn *v1.Function) []string {
	t.Helper()
	var l eventsv1.EventList
	if err := env.Client.List(context.Background(), &l, client.InNamespace(fn.Namespace)); err != nil {
		t.Fatal(err)
	}
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].EventTime.Before(&l.Items[j].EventTime) })
	var out []string
	for _, e := range l.Items {
		if e.Regarding.Name == fn.Name && e.Regarding.Kind == "Function" {
			out = append(out, e.Type+"/"+e.Reason)
		}
	}
	return out
}

func TestSteadyStateMakesNoWrites(t *testing.T) {
	ns := newNamespace(t)
	fn := readyFunction(t, ns, "steady", "b")
	key := revisionKey(fn, 1)
	named := func(name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }
	// The function, what runs its revision, its identity Secret and its namespace's
	// NetworkPolicies.
	objects := []struct {
		obj client.Object
		key client.ObjectKey
	}{
		{&v1.Function{}, client.ObjectKeyFromObject(fn)}, {&v1.Revision{}, key}, {&appsv1.Deployment{}, key},
		{&corev1.Service{}, key}, {&httpv1alpha1.HTTPScaledObject{}, key},
		{&corev1.Secret{}, named(scaling.IdentitySecretName(fn.Name))},
		{&networkingv1.NetworkPolicy{}, named(scaling.FunctionsNetworkPolicy)}, {&networkingv1.NetworkPolicy{}, named(scaling.JobsNetworkPolicy)},
	}
	versions := func() string {
		var b bytes.Buffer
		for _, o := range objects {
			if err := get(t, o.key, o.obj); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%T/%s=%s ", o.obj, o.key.Name, o.obj.GetResourceVersion())
		}
		return b.String()
	}
	time.Sleep(time.Second) // let the events of the last writes settle
	before := versions()
	eventsBefore := functionEvents(t, fn)
	// Touch an unrelated annotation on the Deployment: a reconcile runs and must write nothing back.
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	update(t, dep, func() { metav1.SetMetaDataAnnotation(&dep.ObjectMeta, "touched", "yes") })
	before = strings.Replace(before, "*v1.Deployment/"+key.Name+"="+dep.ResourceVersion, "", 1)
	time.Sleep(2 * time.Second)
	_ = get(t, key, dep)
	after := versions()
	if !strings.Contains(after, "*v1.Deployment/"+key.Name+"="+dep.ResourceVersion) {
		t.Errorf("deployment rewritten after an unrelated change")
	}
	for _, part := range strings.Fields(before) {
		if strings.HasPrefix(part, "*v1.Deployment/") {
			continue
		}
		if !strings.Contains(after, part) {
			t.Errorf("steady state wrote %s: before %s after %s", part, before, after)
		}
	}
	if got := functionEvents(t, fn); len(got) != len(eventsBefore) {
		t.Errorf("steady state recorded events: %v, then %v", eventsBefore, got)
	}
}

func TestBuildFailureThenNewSourceRecovers(t *testing.T) {
	ns := newNamespace(t)
	fn := newFunction(ns, "broken", "c")
	create(t, fn)
	finishJob(t, waitBuildJob(t, ns, "broken", "c"), false, "handler/handler.go:3:1: syntax error: non-declaration statement outside function body")
	got := waitFunction(t, fn, v1.FunctionFailed)
	if !strings.Contains(got.Status.LastBuildError, "syntax error: non-declaration statement") || !strings.Contains(got.Status.LastBuildError, "BackoffLimitExceeded") {
		t.Errorf("lastBuildError = %q", got.Status.LastBuildError)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionBuilt); c.Reason != v1.ReasonBuildFailed {
		t.Errorf("Built condition %+v", c)
	}
	if r := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReady); r.Reason != v1.ReasonBuildFailed || r.Message != got.Status.LastBuildError {
		t.Errorf("Ready must carry the first failing dependent: %+v", r)
	}
	eventually(t, "a build-failed Warning", func() error {
		if ev := functionEvents(t, got); !slices.Contains(ev, "Warning/BuildFailed") || !slices.Contains(ev, "Normal/Building") {
			return fmt.Errorf("events %v", ev)
		}
		return nil
	})
	// No retry loop for the same source: the failed Job stays the only one.
	time.Sleep(time.Second)
	if n := len(buildJobs(t, ns, "broken", scaling.LabelFunction)); n != 1 {
		t.Fatalf("%d build jobs after a failure, want 1", n)
	}

	update(t, got, func() {
		got.Spec.Source = &v1.SourceRef{ContextKey: "contexts/" + ns + "/broken/2.tar.gz", SHA256: sha("d")}
	})
	finishJob(t, waitBuildJob(t, ns, "broken", "d"), true, "")
	fixed := waitFunction(t, fn, v1.FunctionReady)
	if fixed.Status.LastBuildError != "" || fixed.Status.BuiltSHA256 != sha("d") {
		t.Errorf("status after recovery = %+v", fixed.Status)
	}
	eventually(t, "built and deployed Events", func() error {
		ev := functionEvents(t, fixed)
		for _, want := range []string{"Normal/Built", "Normal/Deployed", "Normal/PodsHealthy"} {
			if !slices.Contains(ev, want) {
				return fmt.Errorf("no %s in %v", want, ev)
			}
		}
		return nil
	})
}

// TestUnreachableRegistryIsRetried: a build that failed only to reach the registry says so,
// naming it, and is built again after the retry delay until the registry answers.
func TestUnreachableRegistryIsRetried(t *testing.T) {
	defer func(d time.Duration) { *reconcilers.RegistryRetryDelay = d }(*reconcilers.RegistryRetryDelay)
	*reconcilers.RegistryRetryDelay = time.Second
	ns := newNamespace(t)
	fn := newFunction(ns, "offline", "e")
	create(t, fn)
	first := waitBuildJob(t, ns, "offline", "e")
	failBuildStep(t, first, scaling.BuildPushContainer, `sless: pushing `+opts.Build.Registry+`/`+ns+`/offline:sha-eeee: Get "http://`+opts.Build.Registry+`/v2/": dial tcp 10.0.0.9:5000: connect: connection refused`)
	got := waitFunction(t, fn, v1.FunctionFailed)
	ready := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReady)
	if ready.Reason != v1.ReasonRegistryUnavailable || !strings.Contains(ready.Message, "registry "+opts.Build.Registry+" is unreachable") ||
		!strings.Contains(ready.Message, "pushing the image failed: sless: pushing") {
		t.Errorf("Ready condition %+v, want the unreachable registry named and the push step's error", ready)
	}
	var retried *batchv1.Job
	eventually(t, "a retried build", func() error {
		retried = waitBuildJob(t, ns, "offline", "e")
		if retried.UID == first.UID {
			return fmt.Errorf("still the first build job")
		}
		return nil
	})
	finishJob(t, retried, true, "")
	if fixed := waitFunction(t, fn, v1.FunctionReady); fixed.Status.LastBuildError != "" {
		t.Errorf("lastBuildError after recovery = %q", fixed.Status.LastBuildError)
	}
}

// TestPodThatCannotPullIsNotReady: a built Function whose pod cannot pull its image reports
// the pod's reason instead of Ready, and is Ready again once the pod runs.
func TestPodThatCannotPullIsNotReady(t *testing.T) {
	ns := newNamespace(t)
	fn := readyFunction(t, ns, "unpullable", "f")
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "unpullable-1", Namespace: ns, Labels: scaling.FunctionLabels(fn)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "function", Image: fn.Status.Image}}}}
	create(t, pod)
	setWaiting := func(reason string) {
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "function", Image: fn.Status.Image}}
		if reason != "" {
			pod.Status.ContainerStatuses[0].State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: "pulling: dial tcp: connection refused"}
		} else {
			pod.Status.ContainerStatuses[0].State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.Now()}
		}
		if err := env.Client.Status().Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	setWaiting("ImagePullBackOff")
	got := waitFunction(t, fn, v1.FunctionFailed)
	if ready := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReady); ready.Reason != "ImagePullBackOff" || !strings.Contains(ready.Message, "pod unpullable-1") {
		t.Errorf("Ready condition %+v, want the pod's ImagePullBackOff", ready)
	}
	setWaiting("")
	waitFunction(t, fn, v1.FunctionReady)
}

// TestRevisionPerChangeWithoutRebuild: a scaling change alone keeps the revision and
// reaches its HTTPScaledObject; an env change makes the next revision (same image, no
// build), which gets the traffic and its own objects, while the previous one's go once
// it has none; a re-upload of the same source makes no revision.
func TestRevisionPerChangeWithoutRebuild(t *testing.T) {
	ns := newNamespace(t)
	fn := readyFunction(t, ns, "envy", "e")
	update(t, fn, func() { fn.Spec.Scale.MaxReplicas = 7 })
	eventually(t, "HTTPScaledObject max updated in place", func() error {
		h := &httpv1alpha1.HTTPScaledObject{}
		if err := get(t, revisionKey(fn, 1), h); err != nil {
			return err
		}
		if *h.Spec.Replicas.Max != 7 {
			return fmt.Errorf("max %d", *h.Spec.Replicas.Max)
		}
		return nil
	})
	if err := isNotFound(get(t, revisionKey(fn, 2), &v1.Revision{})); err != nil {
		t.Errorf("a scaling change made a revision: %v", err)
	}
	update(t, fn, func() { fn.Spec.Env = map[string]string{"GREETING": "bonjour", "EXTRA": "1"} })
	envOf := func(key client.ObjectKey) (map[string]string, error) {
		dep := &appsv1.Deployment{}
		if err := get(t, key, dep); err != nil {
			return nil, err
		}
		env := map[string]string{}
		for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		return env, nil
	}
	eventually(t, "revision 2 running the new env and serving", func() error {
		env, err := envOf(revisionKey(fn, 2))
		if err != nil {
			return err
		}
		if env["GREETING"] != "bonjour" || env["EXTRA"] != "1" || env["SLESS_REVISION"] != "envy-2" {
			return fmt.Errorf("env %v", env)
		}
		got := &v1.Function{}
		_ = get(t, client.ObjectKeyFromObject(fn), got)
		if len(got.Status.Traffic) != 1 || got.Status.Traffic[0].Revision != "envy-2" {
			return fmt.Errorf("traffic %+v", got.Status.Traffic)
		}
		return nil
	})
	h := &httpv1alpha1.HTTPScaledObject{}
	if err := get(t, revisionKey(fn, 2), h); err != nil || *h.Spec.Replicas.Max != 7 {
		t.Errorf("revision 2's HTTPScaledObject %v: the function's scaling applies to every revision", err)
	}
	eventually(t, "revision 1's objects gone once it has no traffic", func() error {
		for _, obj := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}, &httpv1alpha1.HTTPScaledObject{}} {
			if err := isNotFound(get(t, revisionKey(fn, 1), obj)); err != nil {
				return fmt.Errorf("%T: %w", obj, err)
			}
		}
		return nil
	})
	rev := &v1.Revision{}
	if err := get(t, revisionKey(fn, 1), rev); err != nil || rev.Status.Serving || rev.Status.Phase != "ready" {
		t.Errorf("revision 1 kept in history, not serving: %+v %v", rev.Status, err)
	}
	// A revision is never edited.
	rev.Spec.Env = map[string]string{"GREETING": "edited"}
	if err := env.Client.Update(context.Background(), rev); err == nil || !strings.Contains(err.Error(), "a revision is never edited") {
		t.Errorf("editing a revision: %v", err)
	}
	// The same source uploaded again (same hash) neither rebuilds nor makes a revision.
	update(t, fn, func() { fn.Spec.Source.ContextKey = "contexts/" + ns + "/envy/2.tar.gz" })
	waitFunction(t, fn, v1.FunctionReady)
	time.Sleep(500 * time.Millisecond)
	if n := len(buildJobs(t, ns, "envy", scaling.LabelFunction)); n != 1 {
		t.Errorf("%d build jobs, want 1", n)
	}
	if err := isNotFound(get(t, revisionKey(fn, 3), &v1.Revision{})); err != nil {
		t.Errorf("a re-upload of the same source made a revision: %v", err)
	}
}

// TestKEDAOwnsReplicas: the operator never fights KEDA over Deployment replicas.
func TestKEDAOwnsReplicas(t *testing.T) {
	ns := newNamespace(t)
	fn := readyFunction(t, ns, "scaled", "f")
	key := revisionKey(fn, 1)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	var image string
	update(t, dep, func() {
		dep.Spec.Replicas = ptr.To[int32](3) // what KEDA's HPA would do
		image = dep.Spec.Template.Spec.Containers[0].Image
		dep.Spec.Template.Spec.Containers[0].Image = "example.com/other:1" // forces an apply
	})
	eventually(t, "image taken back with replicas kept", func() error {
		_ = get(t, key, dep)
		if dep.Spec.Template.Spec.Containers[0].Image != image {
			return fmt.Errorf("image not taken back yet")
		}
		if *dep.Spec.Replicas != 3 {
			return fmt.Errorf("replicas reset to %d", *dep.Spec.Replicas)
		}
		return nil
	})
}

// TestEditedChildIsTakenBack: a write that takes one of sless's fields (kubectl edit of the
// image) is undone by the next reconcile, while a function no autoscaler has scaled yet
// keeps the replicas sless created it with across an update (a server-side apply that
// dropped them would reset them to 1 and start a pod).
func TestEditedChildIsTakenBack(t *testing.T) {
	ns := newNamespace(t)
	fn := readyFunction(t, ns, "edited", "9")
	key := revisionKey(fn, 1)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	if err := get(t, key, dep); err != nil {
		t.Fatal(err)
	}
	image := dep.Spec.Template.Spec.Containers[0].Image
	if *dep.Spec.Replicas != 0 {
		t.Fatalf("a function at min 0 created with %d replicas", *dep.Spec.Replicas)
	}
	update(t, dep, func() { dep.Spec.Template.Spec.Containers[0].Image = "example.com/other:1" })
	update(t, fn, func() { fn.Spec.Scale.MaxReplicas = 3 }) // a reconcile that applies the revision's objects again
	eventually(t, "the image taken back", func() error {
		_ = get(t, key, dep)
		if c := dep.Spec.Template.Spec.Containers[0]; c.Image != image {
			return fmt.Errorf("image %s", c.Image)
		}
		return nil
	})
	if *dep.Spec.Replicas != 0 {
		t.Errorf("replicas %d after an update, want the 0 sless created the Deployment with", *dep.Spec.Replicas)
	}
}

// TestScaledObjectPauseIsKeptRight: the add-on merge-patches the HTTPScaledObject's
// annotations onto its ScaledObject from its own cache, so a stale pass can put back the
// paused annotation of a function that is no longer paused; the operator takes it off again.
func TestScaledObjectPauseIsKeptRight(t *testing.T) {
	ns := newNamespace(t)
	fn := readyFunction(t, ns, "unpaused", "8")
	rev := &v1.Revision{}
	if err := get(t, revisionKey(fn, 1), rev); err != nil {
		t.Fatal(err)
	}
	so := &kedav1alpha1.ScaledObject{
		// Named and labelled as the add-on generates it from the revision's HTTPScaledObject.
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: rev.Name, Labels: scaling.RevisionLabels(rev)},
		Spec: kedav1alpha1.ScaledObjectSpec{ScaleTargetRef: &kedav1alpha1.ScaleTarget{Name: rev.Name},
			Triggers: []kedav1alpha1.ScaleTriggers{{Type: "external", Metadata: map[string]string{"scalerAddress": "scaler:9090"}}}},
	}
	create(t, so) // as the add-on generates it
	update(t, so, func() { metav1.SetMetaDataAnnotation(&so.ObjectMeta, scaling.AnnotationPausedReplicas, "0") })
	eventually(t, "the stale paused annotation removed", func() error {
		if err := get(t, client.ObjectKeyFromObject(so), so); err != nil {
			return err
		}
		if v, ok := so.Annotations[scaling.AnnotationPausedReplicas]; ok {
			return fmt.Errorf("paused-replicas %q", v)
		}
		return nil
	})
}

func TestDeleteRunsFinalizer(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	fn := readyFunction(t, ns, "gone", "1")
	for _, key := range []string{"functions/" + ns + "/gone/1.zip", "contexts/" + ns + "/gone/1.tar.gz"} {
		if err := artifacts.Store.Put(ctx, key, strings.NewReader("x"), 1, "application/octet-stream"); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Client.Delete(ctx, fn); err != nil {
		t.Fatal(err)
	}
	eventually(t, "function deleted after its finalizer", func() error { return isNotFound(get(t, client.ObjectKeyFromObject(fn), &v1.Function{})) })
	for _, prefix := range []string{"functions/" + ns + "/gone/", "contexts/" + ns + "/gone/"} {
		objs, err := artifacts.Store.List(ctx, prefix)
		if err != nil || len(objs) != 0 {
			t.Errorf("artifacts under %s left: %v %v", prefix, objs, err)
		}
	}
	if n := len(buildJobs(t, ns, "gone", scaling.LabelFunction)); n != 0 {
		t.Errorf("%d build jobs left", n)
	}
}

func TestOperatorRestartMidBuildDoesNotRebuild(t *testing.T) {
	ns := newNamespace(t)
	fn := newFunction(ns, "restart", "2")
	create(t, fn)
	job := waitBuildJob(t, ns, "restart", "2")
	waitFunction(t, fn, v1.FunctionBuilding)
	stopMgr()
	if err := startManager(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the new manager re-lists everything and reconciles the function
	if n := len(buildJobs(t, ns, "restart", scaling.LabelFunction)); n != 1 {
		t.Fatalf("%d build jobs after a restart, want 1", n)
	}
	finishJob(t, job, true, "")
	waitFunction(t, fn, v1.FunctionReady)
}

// TestPrebuiltImageSkipsTheBuild: spec.image is not built; from a registry that skips tag
// resolution (ko.local: loaded into the nodes, no registry serves it) it runs as given.
func TestPrebuiltImageSkipsTheBuild(t *testing.T) {
	ns := newNamespace(t)
	fn := newFunction(ns, "prebuilt", "3")
	fn.Spec.Source, fn.Spec.Image = nil, "ko.local/team/fn:1.0.0"
	create(t, fn)
	got := waitFunction(t, fn, v1.FunctionReady)
	if got.Status.Image != "ko.local/team/fn:1.0.0" {
		t.Errorf("image %q", got.Status.Image)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionBuilt); c.Reason != v1.ReasonPrebuilt || !strings.Contains(c.Message, "registry ko.local skips tag resolution") {
		t.Errorf("Built %+v", c)
	}
	if n := len(buildJobs(t, ns, "prebuilt", scaling.LabelFunction)); n != 0 {
		t.Errorf("%d build jobs for a prebuilt image", n)
	}
}

func TestFunctionWithoutSourceWaits(t *testing.T) {
	ns := newNamespace(t)
	fn := newFunction(ns, "empty", "4")
	fn.Spec.Source = nil
	create(t, fn)
	got := waitFunction(t, fn, v1.FunctionPending)
	if c := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReady); c == nil || c.Reason != "AwaitingSource" {
		t.Errorf("Ready condition %+v", c)
	}
}
