package cluster_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway/api"
	sclient "sless.dev/sless/gateway/client"
	"sless.dev/sless/rules"
)

// TestSecretsAreLabelledSecrets: a secret is a Kubernetes Secret of the tenant's namespace
// labelled as the API's, its version counted in an annotation; other Secrets of the
// namespace (a pull secret, say) are neither listed, read, changed nor deleted through the
// API; a function's references reach its CRD as names only.
func TestSecretsAreLabelledSecrets(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	tn := h.tenant()
	ctx := context.Background()
	const marker = "marker-c41d-cluster"
	s, err := tn.c.CreateSecret(ctx, tn.ns, api.CreateSecret{Name: "db", SecretFields: api.SecretFields{Data: map[string]string{"password": marker}}})
	if err != nil || s.Version != 1 || strings.Join(s.Keys, ",") != "password" {
		t.Fatalf("create: %+v %v", s, err)
	}
	var obj corev1.Secret
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: tn.ns, Name: "db"}, &obj); err != nil {
		t.Fatal(err)
	}
	if obj.Labels[rules.SecretLabel] != "true" || obj.Annotations[rules.SecretVersionAnnotation] != "1" || string(obj.Data["password"]) != marker {
		t.Fatalf("the Secret: labels %v annotations %v keys %d", obj.Labels, obj.Annotations, len(obj.Data))
	}
	s, err = tn.c.UpdateSecret(ctx, tn.ns, "db", api.SecretFields{Data: map[string]string{"password": marker + "-2", "user": "u"}})
	if err != nil || s.Version != 2 || strings.Join(s.Keys, ",") != "password,user" {
		t.Fatalf("rotate: %+v %v", s, err)
	}

	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pull", Namespace: tn.ns}, Data: map[string][]byte{"k": []byte("v")}}
	if err := env.Client.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.c.GetSecret(ctx, tn.ns, "pull"); !sclient.IsNotFound(err) {
		t.Errorf("get of a Secret not the API's: %v, want 404", err)
	}
	if _, err := tn.c.UpdateSecret(ctx, tn.ns, "pull", api.SecretFields{Data: map[string]string{"k": "x"}}); !sclient.IsNotFound(err) {
		t.Errorf("update of a Secret not the API's: %v, want 404", err)
	}
	if err := tn.c.DeleteSecret(ctx, tn.ns, "pull"); !sclient.IsNotFound(err) {
		t.Errorf("delete of a Secret not the API's: %v, want 404", err)
	}
	list, err := tn.c.ListSecrets(ctx, tn.ns)
	if err != nil || len(list) != 1 || list[0].Name != "db" {
		t.Errorf("list = %+v %v, want db only", list, err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(other), other); err != nil || string(other.Data["k"]) != "v" {
		t.Errorf("the other Secret after the API's attempts: %v %v", other.Data, err)
	}

	// References are names on the Function; the secret cannot go while they stand.
	if _, err := tn.c.CreateFunction(ctx, tn.ns, api.CreateFunction{Name: "f", FunctionFields: api.FunctionFields{Runtime: ptr("go1.23"),
		SecretEnv: &[]api.SecretEnv{{Name: "DB_PASSWORD", Secret: "db", Key: "password"}}, SecretFiles: &[]api.SecretFile{{Secret: "db", Path: "/run/db"}}}}); err != nil {
		t.Fatal(err)
	}
	var fn v1alpha1.Function
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: tn.ns, Name: "f"}, &fn); err != nil {
		t.Fatal(err)
	}
	if len(fn.Spec.SecretEnv) != 1 || fn.Spec.SecretEnv[0].Key != "password" || len(fn.Spec.SecretFiles) != 1 || fn.Spec.SecretFiles[0].Path != "/run/db" {
		t.Errorf("function spec %+v %+v", fn.Spec.SecretEnv, fn.Spec.SecretFiles)
	}
	got, err := tn.c.GetFunction(ctx, tn.ns, "f")
	if err != nil || len(got.SecretEnv) != 1 || got.SecretEnv[0] != (api.SecretEnv{Name: "DB_PASSWORD", Secret: "db", Key: "password"}) {
		t.Errorf("function view %+v %v", got.SecretEnv, err)
	}
	if err := tn.c.DeleteSecret(ctx, tn.ns, "db"); !sclient.IsConflict(err) || !strings.Contains(err.Error(), "function f") {
		t.Errorf("delete while referenced: %v, want 409 naming function f", err)
	}
	if err := tn.c.DeleteFunction(ctx, tn.ns, "f"); err != nil {
		t.Fatal(err)
	}
	if err := tn.c.DeleteSecret(ctx, tn.ns, "db"); err != nil {
		t.Fatal(err)
	}
	// Another tenant sees none of it.
	if _, err := h.tenant().c.ListSecrets(ctx, tn.ns); err == nil {
		t.Error("another tenant listed this tenant's secrets")
	}
}
