package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/scaling"
	"sless.dev/sless/test/testenv"
)

// TestOperatorCommand runs `sless operator` as users do (flags, kubeconfig, leader election,
// probes) against a real API server and checks it drives a Function through its build.
func TestOperatorCommand(t *testing.T) {
	env := testenv.ForTest(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := testenv.WriteKubeconfig(env.Config, kubeconfig); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kubeconfig)
	for _, ns := range []string{"sless-system", "tenant"} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}

	// Without --sless-image the operator takes its own pod's image for the dispatcher pods.
	const selfImage = "registry.example/sless@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	self := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sless-operator-0", Namespace: "sless-system"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "operator", Image: selfImage}}}}
	if err := env.Client.Create(ctx, self); err != nil {
		t.Fatal(err)
	}
	t.Setenv("POD_NAMESPACE", self.Namespace)
	t.Setenv("POD_NAME", self.Name)

	cmd := newOperatorCmd()
	cmd.SetArgs([]string{"--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0",
		"--leader-election-namespace=sless-system", "--artifacts-dir=" + t.TempDir(), "--log-level=warn",
		// No registry to resolve example.org/pre:1 from; allowed, or the policy refuses it.
		"--registries-skipping-tag-resolving=example.org", "--allowed-registries=example.org"})
	cmd.SetErr(os.Stderr)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()

	fn := &v1.Function{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "tenant"},
		Spec: v1.FunctionSpec{CodeSpec: v1.CodeSpec{Runtime: v1.RuntimeNode20,
			Source: &v1.SourceRef{ContextKey: "contexts/tenant/hello/1.tar.gz", SHA256: "ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12"}}},
	}
	if err := env.Client.Create(ctx, fn); err != nil {
		t.Fatal(err)
	}
	job := &batchv1.Job{}
	key := client.ObjectKey{Namespace: "sless-system", Name: scaling.BuildJobName("tenant", "hello", fn.Spec.Source.SHA256)}
	deadline := time.Now().Add(30 * time.Second)
	for env.Client.Get(ctx, key, job) != nil {
		select {
		case err := <-done:
			t.Fatalf("operator exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the operator created no build job")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A prebuilt function goes straight to its first revision's Deployment (its registry is
	// allowed and skips tag resolution).
	pre := &v1.Function{
		ObjectMeta: metav1.ObjectMeta{Name: "pre", Namespace: "tenant"},
		Spec:       v1.FunctionSpec{CodeSpec: v1.CodeSpec{Runtime: v1.RuntimeNode20, Image: "example.org/pre:1"}},
	}
	if err := env.Client.Create(ctx, pre); err != nil {
		t.Fatal(err)
	}
	dep := &appsv1.Deployment{}
	for env.Client.Get(ctx, client.ObjectKey{Namespace: "tenant", Name: "pre-1"}, dep) != nil {
		if time.Now().After(deadline) {
			t.Fatal("no deployment for a prebuilt function")
		}
		time.Sleep(100 * time.Millisecond)
	}
	tick := &v1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "tick", Namespace: "tenant"},
		Spec: v1.TriggerSpec{Type: v1.TriggerCron, FunctionRef: v1.LocalObjectReference{Name: "pre"}, Cron: &v1.CronSpec{Schedule: "* * * * *"}}}
	if err := env.Client.Create(ctx, tick); err != nil {
		t.Fatal(err)
	}
	cj := &batchv1.CronJob{}
	for env.Client.Get(ctx, client.ObjectKey{Namespace: "tenant", Name: scaling.CronJobName("tick")}, cj) != nil {
		if time.Now().After(deadline) {
			t.Fatal("no CronJob for the cron trigger")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if img := cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Image; img != selfImage {
		t.Errorf("dispatcher image %s, want the operator's own %s", img, selfImage)
	}
	stopCommand(t, "operator", cancel, done)
}
