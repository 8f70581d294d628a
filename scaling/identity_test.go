package scaling

import (
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/rules"
)

// TestIdentityKeyOnlyInItsSecret: a function's key reaches its pods and its dispatchers as
// a secretKeyRef to its own Secret (the asynchronous dispatchers, in the platform
// namespace, the master's): no rendered object but that Secret holds the key or the master,
// and a new master rolls the function's pods.
func TestIdentityKeyOnlyInItsSecret(t *testing.T) {
	opts := testOptions()
	opts.AsyncSecret = "sless-gateway"
	fn := testFunction(func(f *v1.Function) { f.Spec.Async = v1.AsyncSpec{Enabled: true, MaxJobs: 2} })
	rev := testRevision(fn, "img")
	key := hex.EncodeToString(rules.FunctionKey(testMaster, fn.Namespace, fn.Name))

	s := MakeIdentitySecret(fn, opts)
	if s.Name != "sless-identity.hello" || s.Namespace != fn.Namespace || string(s.Data["key"]) != key || !metav1.IsControlledBy(s, fn) {
		t.Fatalf("identity secret %s/%s %q, owners %+v", s.Namespace, s.Name, s.Data, s.OwnerReferences)
	}
	if err := rules.CheckName(s.Name); err == nil {
		t.Errorf("%s is a name the secrets API takes: a tenant could create or reference it", s.Name)
	}
	event := &v1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: fn.Namespace}, Spec: v1.TriggerSpec{Type: v1.TriggerEvent,
		FunctionRef: v1.LocalObjectReference{Name: fn.Name}, Event: &v1.EventSpec{Queue: "orders", BrokerSecretRef: v1.SecretKeyReference{Name: "amqp"}}}}
	cron := &v1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "tick", Namespace: fn.Namespace}, Spec: v1.TriggerSpec{Type: v1.TriggerCron,
		FunctionRef: v1.LocalObjectReference{Name: fn.Name}, Cron: &v1.CronSpec{Schedule: "*/5 * * * *"}}}
	dep := MakeDeployment(fn, rev, nil, opts)
	sj := MakeScaledJob(event, fn, opts)
	cj := MakeCronJob(cron, fn, opts)
	async := MakeAsyncScaledJob(fn, opts)
	for _, c := range []struct {
		name   string
		env    []corev1.EnvVar
		want   string // variable
		secret string
		key    string
	}{
		{"function pod", dep.Spec.Template.Spec.Containers[0].Env, rules.EnvIdentityKey, "sless-identity.hello", "key"},
		{"event dispatcher", sj.Spec.JobTargetRef.Template.Spec.Containers[0].Env, rules.EnvIdentityKey, "sless-identity.hello", "key"},
		{"cron dispatcher", cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Env, rules.EnvIdentityKey, "sless-identity.hello", "key"},
		{"async dispatcher", async.Spec.JobTargetRef.Template.Spec.Containers[0].Env, "SLESS_IDENTITY_MASTER", "sless-identity", "master"},
	} {
		found := false
		for _, e := range c.env {
			if e.Name == c.want {
				ref := e.ValueFrom.SecretKeyRef
				found = e.Value == "" && ref != nil && ref.Name == c.secret && ref.Key == c.key
			}
		}
		if !found {
			t.Errorf("%s: no %s from secret %s key %s in %+v", c.name, c.want, c.secret, c.key, c.env)
		}
	}
	for _, obj := range []client.Object{dep, sj, cj, async, MakeRunJob(testJob(), &fn.Spec.CodeSpec, "img", opts)} {
		b, _ := json.Marshal(obj)
		if strings.Contains(string(b), key) || strings.Contains(string(b), hex.EncodeToString(testMaster)) || strings.Contains(string(b), string(testMaster)) {
			t.Errorf("%T %s holds the key or the master: %s", obj, obj.GetName(), b)
		}
	}
	before := dep.Spec.Template.Annotations[AnnotationIdentity]
	opts.IdentityMaster = []byte("another master, 32 bytes long!!!")
	if after := MakeDeployment(fn, rev, nil, opts).Spec.Template.Annotations[AnnotationIdentity]; before == "" || after == before {
		t.Errorf("pod template's key fingerprint %q, then %q with a new master: want a change (pods roll)", before, after)
	}
}
