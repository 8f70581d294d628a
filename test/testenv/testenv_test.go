package testenv_test

import (
	"context"
	"testing"

	httpv1alpha1 "github.com/kedacore/http-add-on/operator/apis/http/v1alpha1"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sless.dev/sless/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

func scaledJob(name string) *kedav1alpha1.ScaledJob {
	return &kedav1alpha1.ScaledJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: kedav1alpha1.ScaledJobSpec{
			JobTargetRef: &batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "c", Image: "busybox:1.36"}},
			}}},
			Triggers: []kedav1alpha1.ScaleTriggers{{Type: "rabbitmq", Metadata: map[string]string{"queueName": "q", "mode": "QueueLength", "value": "5"}}},
		},
	}
}

func httpScaledObject(name string) *httpv1alpha1.HTTPScaledObject {
	return &httpv1alpha1.HTTPScaledObject{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: httpv1alpha1.HTTPScaledObjectSpec{
			Hosts: []string{name + ".default.fn.sless.local"},
			ScaleTargetRef: httpv1alpha1.ScaleTargetRef{
				Name: name, Kind: "Deployment", APIVersion: "apps/v1", Service: name, Port: 8080,
			},
		},
	}
}

// TestKEDAAndAddOnCRDsAreLive proves the harness installed the real KEDA and HTTP add-on
// schemas: typed objects built with their Go types are accepted and broken ones refused.
func TestKEDAAndAddOnCRDsAreLive(t *testing.T) {
	testenv.Need(t)
	ctx := context.Background()
	if err := env.Client.Create(ctx, scaledJob("sj-ok")); err != nil {
		t.Fatalf("valid ScaledJob refused: %v", err)
	}
	if err := env.Client.Create(ctx, httpScaledObject("hso-ok")); err != nil {
		t.Fatalf("valid HTTPScaledObject refused: %v", err)
	}

	noTriggers := scaledJob("sj-bad")
	noTriggers.Spec.Triggers = nil
	if err := env.Client.Create(ctx, noTriggers); !apierrors.IsInvalid(err) {
		t.Errorf("ScaledJob without triggers: want Invalid, got %v", err)
	}
	twoPorts := httpScaledObject("hso-bad")
	twoPorts.Spec.ScaleTargetRef.PortName = "http"
	if err := env.Client.Create(ctx, twoPorts); !apierrors.IsInvalid(err) {
		t.Errorf("HTTPScaledObject with both port and portName: want Invalid (add-on CEL rule), got %v", err)
	}
}
