package scaling

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/rules"
)

func testJob() *v1.FunctionJob {
	return &v1.FunctionJob{ObjectMeta: metav1.ObjectMeta{Name: "report", Namespace: "sless-abc", UID: "uid-4"},
		Spec: v1.FunctionJobSpec{FunctionRef: &v1.LocalObjectReference{Name: "hello"}, RunID: 1}}
}

func withSecrets(fn *v1.Function) {
	fn.Spec.SecretEnv = []v1.SecretEnvVar{{Name: "DB_PASSWORD", Secret: "db", Key: "password"}}
	fn.Spec.SecretFiles = []v1.SecretFilesMount{{Secret: "db"}, {Secret: "tls", Path: "/run/tls"}}
}

// TestSecretReferencesRendered: secret_env becomes secretKeyRef and secret_files read-only
// Secret volumes readable by the pod's fsGroup only, in the Deployment and in job runs; the
// pod template's checksum follows the referenced versions; nothing without references.
func TestSecretReferencesRendered(t *testing.T) {
	fn := testFunction(withSecrets)
	pods := map[string]corev1.PodTemplateSpec{
		"deployment": MakeDeployment(fn, testRevision(fn, "img"), map[string]int64{"db": 1, "tls": 4}, testOptions()).Spec.Template,
		"run job":    MakeRunJob(testJob(), &fn.Spec.CodeSpec, "img", testOptions()).Spec.Template,
	}
	for name, tmpl := range pods {
		t.Run(name, func(t *testing.T) {
			pod, c := tmpl.Spec, tmpl.Spec.Containers[0]
			var ref *corev1.SecretKeySelector
			for _, e := range c.Env {
				if e.Name == "DB_PASSWORD" {
					if e.Value != "" || e.ValueFrom == nil {
						t.Fatalf("DB_PASSWORD = %+v, want a reference", e)
					}
					ref = e.ValueFrom.SecretKeyRef
				}
			}
			if ref == nil || ref.Name != "db" || ref.Key != "password" {
				t.Errorf("DB_PASSWORD references %+v, want db/password", ref)
			}
			if len(pod.Volumes) != 2 || len(c.VolumeMounts) != 2 {
				t.Fatalf("volumes %+v mounts %+v, want one per secret_files entry", pod.Volumes, c.VolumeMounts)
			}
			for i, want := range []struct{ secret, path string }{{"db", rules.SecretMountDir + "/db"}, {"tls", "/run/tls"}} {
				v, m := pod.Volumes[i], c.VolumeMounts[i]
				if v.Secret == nil || v.Secret.SecretName != want.secret || *v.Secret.DefaultMode != 0o440 || m.Name != v.Name || m.MountPath != want.path || !m.ReadOnly {
					t.Errorf("volume %+v mount %+v, want %s read-only at %s, mode 0440", v, m, want.secret, want.path)
				}
			}
			if pod.SecurityContext == nil || pod.SecurityContext.FSGroup == nil || *pod.SecurityContext.FSGroup != secretFilesGroup {
				t.Errorf("pod security context %+v, want fsGroup %d", pod.SecurityContext, secretFilesGroup)
			}
		})
	}
	sum := func(versions map[string]int64) string {
		return MakeDeployment(fn, testRevision(fn, "img"), versions, testOptions()).Spec.Template.Annotations[rules.SecretsChecksumAnnotation]
	}
	if a, b := sum(map[string]int64{"db": 1, "tls": 4}), sum(map[string]int64{"db": 2, "tls": 4}); a == "" || a == b {
		t.Errorf("checksums %q and %q: a rotation must change the pod template", a, b)
	}
	plain := MakeDeployment(testFunction(), testRevision(testFunction(), "img"), nil, testOptions()).Spec.Template
	if _, sum := plain.Annotations[rules.SecretsChecksumAnnotation]; sum || plain.Spec.SecurityContext != nil || len(plain.Spec.Volumes) != 0 {
		t.Errorf("a function without secrets got %+v", plain)
	}
}

// TestDispatchersReadOnlyReferencedSecrets: a function's dispatcher pods (event, cron, async)
// mask its secrets, read as a ServiceAccount that the Role lets get exactly the referenced
// names; without references they get no API credentials and no Role is rendered.
func TestDispatchersReadOnlyReferencedSecrets(t *testing.T) {
	opts := testOptions()
	opts.AsyncSecret = "sless-async"
	event := &v1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "sless-abc"},
		Spec: v1.TriggerSpec{Type: v1.TriggerEvent, FunctionRef: v1.LocalObjectReference{Name: "hello"},
			Event: &v1.EventSpec{Queue: "orders", BrokerSecretRef: v1.SecretKeyReference{Name: "amqp"}}}}
	cron := &v1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "sless-abc"},
		Spec: v1.TriggerSpec{Type: v1.TriggerCron, FunctionRef: v1.LocalObjectReference{Name: "hello"}, Cron: &v1.CronSpec{Schedule: "0 3 * * *"}}}
	pods := func(fn *v1.Function) map[string]corev1.PodSpec {
		return map[string]corev1.PodSpec{
			"event": MakeScaledJob(event, fn, opts).Spec.JobTargetRef.Template.Spec,
			"cron":  MakeCronJob(cron, fn, opts).Spec.JobTemplate.Spec.Template.Spec,
			"async": MakeAsyncScaledJob(fn, opts).Spec.JobTargetRef.Template.Spec,
		}
	}
	wantSA := map[string]string{"event": "sless-secrets-hello", "cron": "sless-secrets-hello", "async": DispatcherServiceAccount}
	for kind, pod := range pods(testFunction(withSecrets)) {
		args := pod.Containers[0].Args
		if !slices.Contains(args, "--mask-secrets=db,tls") || pod.ServiceAccountName != wantSA[kind] || !*pod.AutomountServiceAccountToken {
			t.Errorf("%s dispatcher: args %v, service account %q (token %v); want --mask-secrets=db,tls as %s", kind, args, pod.ServiceAccountName, *pod.AutomountServiceAccountToken, wantSA[kind])
		}
	}
	for kind, pod := range pods(testFunction()) {
		if slices.ContainsFunc(pod.Containers[0].Args, func(a string) bool { return strings.HasPrefix(a, "--mask-secrets") }) ||
			pod.ServiceAccountName != "" || *pod.AutomountServiceAccountToken {
			t.Errorf("%s dispatcher of a function without secrets: args %v, service account %q, token %v", kind, pod.Containers[0].Args, pod.ServiceAccountName, *pod.AutomountServiceAccountToken)
		}
	}

	fn := testFunction(withSecrets)
	role := MakeSecretReaderRole(fn)
	want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{"db", "tls"}}}
	if role == nil || role.Namespace != "sless-abc" || !reflect.DeepEqual(role.Rules, want) || role.OwnerReferences[0].UID != fn.UID {
		t.Fatalf("role %+v, want %+v in sless-abc owned by the function", role, want)
	}
	rb := MakeSecretReaderRoleBinding(fn, opts)
	wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "sless-abc", Name: "sless-secrets-hello"}, {Kind: "ServiceAccount", Namespace: opts.Build.Namespace, Name: DispatcherServiceAccount}}
	if rb.RoleRef.Name != role.Name || rb.RoleRef.Kind != "Role" || !reflect.DeepEqual(rb.Subjects, wantSubjects) {
		t.Errorf("role binding %+v, want %s bound to %+v", rb, role.Name, wantSubjects)
	}
	if sa := MakeSecretReaderServiceAccount(fn); sa.Name != role.Name || *sa.AutomountServiceAccountToken {
		t.Errorf("service account %+v", sa)
	}
	if MakeSecretReaderRole(testFunction()) != nil {
		t.Error("a function without secrets got a Role")
	}
}
