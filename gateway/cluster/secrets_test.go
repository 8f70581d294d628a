package cluster_test

import (
	"context"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway/api"
	sclient "sless.dev/sless/gateway/client"
	"sless.dev/sless/gateway/cluster"
	"sless.dev/sless/rules"
	"sless.dev/sless/scaling"
	"sless.dev/sless/test/testenv"
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
	if _, err := tn.c.CreateFunction(ctx, tn.ns, api.CreateFunction{Name: "f", FunctionFields: api.FunctionFields{Runtime: ptr.To("go1.23"),
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

// TestDispatcherMasksThroughItsRole: with the Role and RoleBinding the operator writes, a
// function's dispatchers — its own ServiceAccount's token and the platform's
// sless-dispatcher's — get exactly the referenced secrets (another Secret of the namespace is
// forbidden); the mask source masks their values and, after a rotation, both the new value
// and the one rotated away.
func TestDispatcherMasksThroughItsRole(t *testing.T) {
	testenv.Need(t)
	ctx := context.Background()
	opts := scaling.DefaultOptions()
	const ns, first, second = "masking", "marker-91ab-first", "marker-91ab-second"
	for _, name := range []string{ns, opts.Build.Namespace} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); client.IgnoreAlreadyExists(err) != nil {
			t.Fatal(err)
		}
	}
	fn := &v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Name: "reader", Namespace: ns, UID: "uid-reader"},
		Spec: v1alpha1.FunctionSpec{CodeSpec: v1alpha1.CodeSpec{SecretEnv: []v1alpha1.SecretEnvVar{{Name: "DB_PASSWORD", Secret: "db", Key: "password"}}}}}
	db := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns, Labels: map[string]string{rules.SecretLabel: "true"}},
		Data: map[string][]byte{"password": []byte(first)}}
	for _, o := range []client.Object{
		db, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pull", Namespace: ns}, Data: map[string][]byte{"k": []byte("v")}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: scaling.DispatcherServiceAccount, Namespace: opts.Build.Namespace}},
		scaling.MakeSecretReaderServiceAccount(fn), scaling.MakeSecretReaderRole(fn), scaling.MakeSecretReaderRoleBinding(fn, opts),
	} {
		if err := env.Client.Create(ctx, o); client.IgnoreAlreadyExists(err) != nil {
			t.Fatal(err)
		}
	}
	cs := kubernetes.NewForConfigOrDie(env.Config)
	for _, sa := range []types.NamespacedName{{Namespace: ns, Name: scaling.SecretReaderName(fn)}, {Namespace: opts.Build.Namespace, Name: scaling.DispatcherServiceAccount}} {
		tr, err := cs.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		as, err := client.New(&rest.Config{Host: env.Config.Host, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: env.Config.CAData}}, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := as.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pull"}, &corev1.Secret{}); !apierrors.IsForbidden(err) {
			t.Errorf("%s read another Secret of the namespace: %v, want forbidden", sa, err)
		}
		if _, err := (&cluster.SecretMaskSource{Client: as, Namespace: ns, Names: []string{"pull"}}).Masker(ctx); err == nil {
			t.Errorf("%s: a mask source of a Secret it may not read gave no error", sa)
		}
		src := &cluster.SecretMaskSource{Client: as, Namespace: ns, Names: []string{"db"}}
		m, err := src.Masker(ctx)
		if err != nil || m.Mask("pw="+first) != "pw="+rules.SecretMask {
			t.Fatalf("%s: masker %v, error %v", sa, m, err)
		}
		db.Data["password"] = []byte(second)
		if err := env.Client.Update(ctx, db); err != nil {
			t.Fatal(err)
		}
		if m, err = src.Masker(ctx); err != nil || m.Mask(first+" "+second) != rules.SecretMask+" "+rules.SecretMask {
			t.Errorf("%s after a rotation: %q, %v; want both values masked", sa, m.Mask(first+" "+second), err)
		}
		db.Data["password"] = []byte(first)
		if err := env.Client.Update(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
}
