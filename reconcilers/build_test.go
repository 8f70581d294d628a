package reconcilers_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/scaling"
)

// TestBuildPodsNetworkPolicy: before a build starts, the build namespace holds the build
// pods' NetworkPolicy, with the registry and the artifact store where they are (an address; an
// in-cluster Service's pods on its target port) and the API server's public address left out
// of the public egress; deleted, it is back before the next build runs.
func TestBuildPodsNetworkPolicy(t *testing.T) {
	ctx := context.Background()
	minio := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "minio", Namespace: opts.Build.Namespace},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "minio"},
			Ports: []corev1.ServicePort{{Name: "s3", Port: 9000, TargetPort: intstr.FromInt32(9001)}}},
	}
	create(t, minio)
	defer env.Client.Delete(ctx, minio)
	// The API server on a public address, as a managed cluster's endpoint is.
	api := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "kubernetes-public", Namespace: metav1.NamespaceDefault, Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"34.118.0.10"}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(443))}},
	}
	create(t, api)
	defer env.Client.Delete(ctx, api)

	ns := newNamespace(t)
	create(t, newFunction(ns, "walled", "a1"))
	job := waitBuildJob(t, ns, "walled", "a1")
	np := &networkingv1.NetworkPolicy{}
	if err := get(t, client.ObjectKey{Namespace: opts.Build.Namespace, Name: scaling.BuildNetworkPolicyName}, np); err != nil {
		t.Fatalf("a build started without its NetworkPolicy: %v", err)
	}
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || !sel.Matches(labels.Set(job.Spec.Template.Labels)) {
		t.Errorf("the policy's selector %v does not select the build's pods %v", sel, job.Spec.Template.Labels)
	}
	host, port, _ := net.SplitHostPort(testRegistry)
	var found []string
	for _, r := range np.Spec.Egress {
		for _, to := range r.To {
			var ports []string
			for _, p := range r.Ports {
				ports = append(ports, p.Port.String())
			}
			switch {
			case to.IPBlock != nil && to.IPBlock.CIDR == host+"/32" && slices.Equal(ports, []string{port}):
				found = append(found, "registry")
			case to.PodSelector != nil && to.PodSelector.MatchLabels["app"] == "minio" &&
				to.NamespaceSelector.MatchLabels[corev1.LabelMetadataName] == opts.Build.Namespace && slices.Equal(ports, []string{"9001"}):
				found = append(found, "artifact store")
			case to.IPBlock != nil && to.IPBlock.CIDR == "0.0.0.0/0" && slices.Contains(to.IPBlock.Except, "34.118.0.10/32") &&
				slices.Contains(to.IPBlock.Except, "169.254.0.0/16") && slices.Contains(to.IPBlock.Except, "10.0.0.0/8"):
				found = append(found, "public")
			}
		}
	}
	slices.Sort(found)
	if want := []string{"artifact store", "public", "registry"}; !slices.Equal(found, want) {
		t.Errorf("egress rules %+v: found %v, want %v", np.Spec.Egress, found, want)
	}

	if err := env.Client.Delete(ctx, np); err != nil {
		t.Fatal(err)
	}
	create(t, newFunction(ns, "walled-again", "a2"))
	waitBuildJob(t, ns, "walled-again", "a2")
	if err := get(t, client.ObjectKeyFromObject(np), &networkingv1.NetworkPolicy{}); err != nil {
		t.Errorf("a build started after its policy was deleted, without it: %v", err)
	}
}

// TestBuildStepFailuresAreNamed: a build that failed before or after kaniko says which step
// failed and why; a layout the push step refused is a failed build, not a registry outage.
func TestBuildStepFailuresAreNamed(t *testing.T) {
	ns := newNamespace(t)
	cases := map[string]struct {
		step, message, want string
	}{
		"fetch": {scaling.BuildFetchContainer, "sless: fetching contexts/x: object not found", "fetching the build context failed: sless: fetching contexts/x: object not found"},
		"push": {scaling.BuildPushContainer, "sless: the build's output is not a plain OCI layout: image/blobs/sha256/ab is a symbolic link, which a build step may have planted",
			"pushing the image failed: sless: the build's output is not a plain OCI layout: image/blobs/sha256/ab is a symbolic link"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			seed := map[string]string{"fetch": "f1", "push": "f2"}[name]
			fn := newFunction(ns, "step-"+name, seed)
			create(t, fn)
			failBuildStep(t, waitBuildJob(t, ns, fn.Name, seed), tc.step, tc.message)
			got := waitFunction(t, fn, v1.FunctionFailed)
			built := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionBuilt)
			if built.Reason != v1.ReasonBuildFailed || !strings.Contains(got.Status.LastBuildError, tc.want) {
				t.Errorf("Built %s: %q, want BuildFailed saying %q", built.Reason, got.Status.LastBuildError, tc.want)
			}
		})
	}
}

// TestBuildImageIsThePushStepsDigest: a Function runs the digest the push step reported in its
// own repository; a report of another repository fails the build; a completed build whose pod
// is gone is built again rather than trusted.
func TestBuildImageIsThePushStepsDigest(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)

	fn := newFunction(ns, "elsewhere", "b1")
	create(t, fn)
	other := strings.Replace(builtImage(t, waitBuildJob(t, ns, fn.Name, "b1")), "/"+ns+"/", "/sless-other/", 1)
	finishJob(t, waitBuildJob(t, ns, fn.Name, "b1"), true, other)
	got := waitFunction(t, fn, v1.FunctionFailed)
	if got.Status.Image != "" || !strings.Contains(got.Status.LastBuildError, "did not report") {
		t.Errorf("image %q, error %q: want no image and the build failed", got.Status.Image, got.Status.LastBuildError)
	}

	lost := newFunction(ns, "lost", "b2")
	create(t, lost)
	first := waitBuildJob(t, ns, lost.Name, "b2")
	now := metav1.Now()
	first.Status.StartTime, first.Status.CompletionTime, first.Status.Succeeded = &now, &now, 1
	first.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	if err := env.Client.Status().Update(ctx, first); err != nil {
		t.Fatal(err)
	}
	var again *batchv1.Job
	eventually(t, "the build run again", func() error {
		again = waitBuildJob(t, ns, lost.Name, "b2")
		if again.UID == first.UID {
			return fmt.Errorf("still the first build job")
		}
		return nil
	})
	finishJob(t, again, true, "")
	if ready := waitFunction(t, lost, v1.FunctionReady); ready.Status.Image != builtImage(t, again) {
		t.Errorf("image %q, want %q", ready.Status.Image, builtImage(t, again))
	}
}
