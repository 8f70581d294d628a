package reconcilers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/rules"
	"sless.dev/sless/scaling"
)

// apiSecret is a Secret as the secrets API writes it.
func apiSecret(ns, name string, version int, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
		Labels:      map[string]string{rules.SecretLabel: "true", "app.kubernetes.io/managed-by": "sless"},
		Annotations: map[string]string{rules.SecretVersionAnnotation: fmt.Sprint(version)}}, StringData: data}
	return s
}

// deployedMessage is the Deployed condition's reason and message.
func deployedMessage(t *testing.T, fn *v1.Function) (string, string) {
	got := &v1.Function{}
	if err := get(t, client.ObjectKeyFromObject(fn), got); err != nil {
		return "", err.Error()
	}
	c := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionDeployed)
	if c == nil || c.ObservedGeneration != got.Generation {
		return "", "no Deployed condition for the current generation"
	}
	return c.Reason, c.Message
}

// TestSecretReferences: a reference to a missing secret or key, or to a Secret that is not
// the secrets API's, is Deployed=False/SecretNotFound naming it, and the running Deployment
// stays as it was; once the secret is there the pods get secretKeyRef, and a rotation (a new
// version) changes the pod template's checksum, which rolls them.
func TestSecretReferences(t *testing.T) {
	ns := newNamespace(t)
	fn := readyFunction(t, ns, "reads", "7")
	key := revisionKey(fn, 1)
	dep := &appsv1.Deployment{}
	if err := get(t, key, dep); err != nil {
		t.Fatal(err)
	}
	before := dep.Spec.Template.DeepCopy()

	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pull", Namespace: ns}, StringData: map[string]string{"password": "x"}})
	update(t, fn, func() { fn.Spec.SecretEnv = []v1.SecretEnvVar{{Name: "DB_PASSWORD", Secret: "pull", Key: "password"}} })
	eventually(t, "SecretNotFound for a Secret not the API's", func() error {
		if reason, msg := deployedMessage(t, fn); reason != v1.ReasonSecretNotFound || !strings.Contains(msg, `secret "pull" does not exist`) {
			return fmt.Errorf("%s: %s", reason, msg)
		}
		return nil
	})
	update(t, fn, func() { fn.Spec.SecretEnv = []v1.SecretEnvVar{{Name: "DB_PASSWORD", Secret: "db", Key: "password"}} })
	create(t, apiSecret(ns, "db", 1, map[string]string{"user": "u"}))
	eventually(t, "SecretNotFound naming the missing key", func() error {
		if reason, msg := deployedMessage(t, fn); reason != v1.ReasonSecretNotFound || !strings.Contains(msg, `has no key "password"`) {
			return fmt.Errorf("%s: %s", reason, msg)
		}
		return nil
	})
	if err := get(t, key, dep); err != nil || !equalTemplates(before, &dep.Spec.Template) {
		t.Fatalf("the Deployment changed while a secret was missing: %v", err)
	}
	// The revisions waiting for the secret never took the traffic.
	for n, phase := range map[int64]string{2: "failed", 3: "building"} {
		rev := &v1.Revision{}
		if err := get(t, revisionKey(fn, n), rev); err != nil || string(rev.Status.Phase) != phase {
			t.Errorf("revision %d: %+v %v, want %s", n, rev.Status, err, phase)
		}
	}
	got := &v1.Function{}
	if err := get(t, client.ObjectKeyFromObject(fn), got); err != nil || len(got.Status.Traffic) != 1 || got.Status.Traffic[0].Revision != "reads-1" {
		t.Errorf("traffic %+v (%v) while revision 3 waits for its secret", got.Status.Traffic, err)
	}
	key = revisionKey(fn, 3)

	s := &corev1.Secret{}
	if err := get(t, client.ObjectKey{Namespace: ns, Name: "db"}, s); err != nil {
		t.Fatal(err)
	}
	update(t, s, func() { s.Data = map[string][]byte{"password": []byte("p1")} })
	var sum string
	eventually(t, "the Deployment reading the secret by reference", func() error {
		_ = get(t, key, dep)
		sum = dep.Spec.Template.Annotations[rules.SecretsChecksumAnnotation]
		for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
			if e.Name == "DB_PASSWORD" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef.Name == "db" && e.Value == "" && sum != "" {
				return nil
			}
		}
		return fmt.Errorf("env %+v checksum %q", dep.Spec.Template.Spec.Containers[0].Env, sum)
	})
	update(t, s, func() {
		s.Data = map[string][]byte{"password": []byte("p2")}
		s.Annotations[rules.SecretVersionAnnotation] = "2"
	})
	eventually(t, "a rotation changing the pod template", func() error {
		_ = get(t, key, dep)
		if got := dep.Spec.Template.Annotations[rules.SecretsChecksumAnnotation]; got == sum || got == "" {
			return fmt.Errorf("checksum %q, was %q", got, sum)
		}
		return nil
	})

	// The dispatchers' access: get on the referenced secret only, removed with the reference.
	reader := client.ObjectKey{Namespace: ns, Name: scaling.SecretReaderName(fn)}
	eventually(t, "a Role that may get the referenced secret only, bound to the dispatchers", func() error {
		role, rb := &rbacv1.Role{}, &rbacv1.RoleBinding{}
		if err := get(t, reader, role); err != nil {
			return err
		}
		if err := get(t, reader, rb); err != nil {
			return err
		}
		if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].ResourceNames, []string{"db"}) || !slices.Equal(role.Rules[0].Verbs, []string{"get"}) {
			return fmt.Errorf("role rules %+v", role.Rules)
		}
		if len(rb.Subjects) != 2 || rb.Subjects[1].Name != scaling.DispatcherServiceAccount {
			return fmt.Errorf("binding subjects %+v", rb.Subjects)
		}
		return get(t, reader, &corev1.ServiceAccount{})
	})
	update(t, fn, func() { fn.Spec.SecretEnv = nil })
	eventually(t, "the dispatchers' access removed with the last reference", func() error {
		for _, obj := range []client.Object{&rbacv1.Role{}, &rbacv1.RoleBinding{}, &corev1.ServiceAccount{}} {
			if err := get(t, reader, obj); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T: %v", obj, err)
			}
		}
		return nil
	})
}

func equalTemplates(a, b *corev1.PodTemplateSpec) bool {
	return a.Spec.Containers[0].Image == b.Spec.Containers[0].Image && len(a.Spec.Containers[0].Env) == len(b.Spec.Containers[0].Env) &&
		len(a.Annotations) == len(b.Annotations)
}

// TestTerminationMessagesMasked: what a build or a run printed reaches the operator's
// objects — a Function's lastBuildError, its conditions and their Events, a FunctionJob's
// result, error, output and condition — with the values of the secrets the code references
// masked, after a rotation with the new ones.
func TestTerminationMessagesMasked(t *testing.T) {
	ns := newNamespace(t)
	values := []string{"term-value-61b0-first", "term-value-d93c-second"}
	secret := apiSecret(ns, "db", 1, map[string]string{"password": values[0]})
	create(t, secret)
	refs := []v1.SecretEnvVar{{Name: "DB_PASSWORD", Secret: "db", Key: "password"}}
	fn := newFunction(ns, "leaky", "e1")
	fn.Spec.SecretEnv = refs
	create(t, fn)
	finishJob(t, waitBuildJob(t, ns, "leaky", "e1"), false, "pip: could not read "+values[0])
	failed := waitFunction(t, fn, v1.FunctionFailed)
	if !strings.Contains(failed.Status.LastBuildError, "could not read "+rules.SecretMask) {
		t.Errorf("lastBuildError %q, want the build's output with the value masked", failed.Status.LastBuildError)
	}
	eventually(t, "the build-failed Warning", func() error {
		if ev := functionEvents(t, failed); !slices.Contains(ev, "Warning/BuildFailed") {
			return fmt.Errorf("events %v", ev)
		}
		return nil
	})

	fj := createJob(t, ns, "report", v1.FunctionJobSpec{CodeSpec: v1.CodeSpec{Runtime: v1.RuntimePython311, SecretEnv: refs,
		Source: &v1.SourceRef{ContextKey: "contexts/" + ns + "/report/1.tar.gz", SHA256: sha("e2")}}, RunID: 1})
	finishJob(t, waitBuildJob(t, ns, "report", "e2"), true, "")
	finishJob(t, runJob(t, fj), true, `{"token":"`+values[0]+`"}`)
	if r := waitJobPhase(t, fj, v1.JobSucceeded, 1); r.Status.Result != `{"token":"`+rules.SecretMask+`"}` {
		t.Errorf("run result %q, want the value masked", r.Status.Result)
	}

	// Rotated: the next run's failure quotes the new value.
	secret.StringData = map[string]string{"password": values[1]}
	secret.Annotations[rules.SecretVersionAnnotation] = "2"
	if err := env.Client.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	got := &v1.FunctionJob{}
	if err := get(t, client.ObjectKeyFromObject(fj), got); err != nil {
		t.Fatal(err)
	}
	update(t, got, func() { got.Spec.RunID = 2 })
	fj.Spec.RunID = 2
	finishJob(t, runJob(t, fj), false, `{"error":"cannot log in with `+values[1]+`"}`)
	second := waitJobPhase(t, fj, v1.JobFailed, 2)
	if !strings.Contains(second.Status.Error, "cannot log in with "+rules.SecretMask) {
		t.Errorf("run error %q, want the value masked", second.Status.Error)
	}

	// Nothing the operator wrote holds a value: the Function, the FunctionJob, the Events.
	var events eventsv1.EventList
	if err := env.Client.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	first := &v1.FunctionJob{}
	_ = get(t, client.ObjectKeyFromObject(fj), first)
	leaky := &v1.Function{}
	_ = get(t, client.ObjectKeyFromObject(fn), leaky)
	text, err := json.Marshal([]any{leaky, first, events.Items})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range values {
		if i := strings.Index(string(text), v); i >= 0 {
			t.Errorf("the operator's objects hold a value: …%s…", text[max(0, i-200):min(len(text), i+60)])
		}
	}
}
