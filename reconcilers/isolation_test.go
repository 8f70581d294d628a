package reconcilers_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/rules"
	"sless.dev/sless/scaling"
)

// waitPolicies waits until namespace ns holds the tenant NetworkPolicies as rendered.
func waitPolicies(t *testing.T, ns string) {
	t.Helper()
	for _, want := range scaling.MakeTenantNetworkPolicies(ns, opts) {
		eventually(t, "NetworkPolicy "+want.Name+" in "+ns, func() error {
			got := &networkingv1.NetworkPolicy{}
			if err := get(t, client.ObjectKeyFromObject(want), got); err != nil {
				return err
			}
			if !equality.Semantic.DeepEqual(got.Spec, want.Spec) {
				return fmt.Errorf("spec %+v, want %+v", got.Spec, want.Spec)
			}
			return nil
		})
	}
}

// TestTenantIsolation: before a function's pods run, its namespace has the tenant
// NetworkPolicies and the function its identity Secret — its own key, controlled by it, read
// by its pods through a secretKeyRef and written nowhere else the operator writes (the
// Function's status, its Events, the Deployment). A deleted Secret is written again; a
// namespace whose only tenant code is a FunctionJob gets the policies before its run.
func TestTenantIsolation(t *testing.T) {
	ns := newNamespace(t)
	fn := readyFunction(t, ns, "isolated", "e")
	waitPolicies(t, ns)
	key := hex.EncodeToString(rules.FunctionKey(opts.IdentityMaster, ns, "isolated"))
	secret := &corev1.Secret{}
	skey := client.ObjectKey{Namespace: ns, Name: scaling.IdentitySecretName("isolated")}
	if err := get(t, skey, secret); err != nil {
		t.Fatal(err)
	}
	if string(secret.Data["key"]) != key || !metav1.IsControlledBy(secret, fn) || secret.Labels[rules.SecretLabel] != "" {
		t.Errorf("identity secret %q, owners %+v, labels %v: want the function's key, controlled by it, not one of the secrets API's", secret.Data, secret.OwnerReferences, secret.Labels)
	}
	dep := &appsv1.Deployment{}
	if err := get(t, revisionKey(fn, 1), dep); err != nil {
		t.Fatal(err)
	}
	var events eventsv1.EventList
	if err := env.Client.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for what, obj := range map[string]any{"function": fn, "deployment": dep, "events": events} {
		b, _ := json.Marshal(obj)
		if strings.Contains(string(b), key) || strings.Contains(string(b), hex.EncodeToString(opts.IdentityMaster)) {
			t.Errorf("the %s holds the key or the master: %s", what, b)
		}
	}
	if err := env.Client.Delete(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted identity secret written again", func() error {
		s := &corev1.Secret{}
		if err := get(t, skey, s); err != nil {
			return err
		}
		if s.UID == secret.UID || string(s.Data["key"]) != key {
			return fmt.Errorf("uid %s (was %s)", s.UID, secret.UID)
		}
		return nil
	})

	jobs := newNamespace(t)
	fj := createJob(t, jobs, "once", v1.FunctionJobSpec{CodeSpec: v1.CodeSpec{Runtime: v1.RuntimeGo123, Image: "kind.local/tool:1"}, RunID: 1})
	eventually(t, "the job's run", func() error {
		return get(t, client.ObjectKey{Namespace: jobs, Name: scaling.RunJobName(fj.Name, 1)}, &batchv1.Job{})
	})
	waitPolicies(t, jobs)
}
