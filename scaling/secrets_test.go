package scaling

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
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
		"deployment": MakeDeployment(fn, "img", map[string]int64{"db": 1, "tls": 4}, testOptions()).Spec.Template,
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
		return MakeDeployment(fn, "img", versions, testOptions()).Spec.Template.Annotations[rules.SecretsChecksumAnnotation]
	}
	if a, b := sum(map[string]int64{"db": 1, "tls": 4}), sum(map[string]int64{"db": 2, "tls": 4}); a == "" || a == b {
		t.Errorf("checksums %q and %q: a rotation must change the pod template", a, b)
	}
	plain := MakeDeployment(testFunction(), "img", nil, testOptions()).Spec.Template
	if len(plain.Annotations) != 0 || plain.Spec.SecurityContext != nil || len(plain.Spec.Volumes) != 0 {
		t.Errorf("a function without secrets got %+v", plain)
	}
}
