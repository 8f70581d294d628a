package scaling_test

import (
	"context"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/scaling"
	"sless.dev/sless/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

const sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestRenderedObjectsAreAcceptedByTheAPIServer server-side-applies every renderer's output to
// a real kube-apiserver with KEDA's and the HTTP add-on's CRDs, so a schema mistake (a field
// the CRD does not know, a bad enum, a name too long) fails here rather than in a cluster.
func TestRenderedObjectsAreAcceptedByTheAPIServer(t *testing.T) {
	testenv.Need(t)
	ctx := context.Background()
	c := env.Client
	opts := scaling.DefaultOptions()
	opts.SlessImage = "registry.example/sless:test"
	opts.HistorySecret = "sless-history"
	opts.Build.RegistrySecret = "registry-push"
	opts.IdentityMaster = []byte("0123456789abcdef0123456789abcdef")
	allow, err := scaling.ParseEgressRule("fd12::/64:443")
	if err != nil {
		t.Fatal(err)
	}
	opts.Network.EgressAllow = []scaling.EgressRule{allow}
	opts.Network.APIServer = []netip.Addr{netip.MustParseAddr("34.120.1.2")}
	for _, ns := range []string{"sless-apply", opts.Build.Namespace} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	fn := &v1.Function{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "sless-apply"},
		Spec: v1.FunctionSpec{CodeSpec: v1.CodeSpec{
			Runtime: v1.RuntimeGo123, TimeoutSeconds: 30, Env: map[string]string{"B": "2", "A": "1"},
			SecretEnv: []v1.SecretEnvVar{{Name: "DB_PASSWORD", Secret: "db", Key: "password"}},
			Source:    &v1.SourceRef{ContextKey: "contexts/sless-apply/hello/1.tar.gz", SHA256: sha},
		}, Scale: v1.ScaleSpec{MaxReplicas: 3, ScaleDownPeriodSeconds: 30, Metric: v1.ScaleOnRequestRate, Target: 50}},
	}
	if err := c.Create(ctx, fn); err != nil {
		t.Fatal(err)
	}
	event := &v1.Trigger{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: fn.Namespace},
		Spec: v1.TriggerSpec{Type: v1.TriggerEvent, FunctionRef: v1.LocalObjectReference{Name: fn.Name}, Enabled: ptr.To(false),
			Event: &v1.EventSpec{Queue: "orders", BrokerSecretRef: v1.SecretKeyReference{Name: "amqp"}}},
	}
	cron := &v1.Trigger{
		ObjectMeta: metav1.ObjectMeta{Name: "a-very-long-trigger-name-that-needs-shortening-for-cron", Namespace: fn.Namespace},
		Spec: v1.TriggerSpec{Type: v1.TriggerCron, FunctionRef: v1.LocalObjectReference{Name: fn.Name},
			Cron: &v1.CronSpec{Schedule: "*/5 * * * *", Timezone: "Europe/Berlin"}},
	}
	fj := &v1.FunctionJob{
		ObjectMeta: metav1.ObjectMeta{Name: "once", Namespace: fn.Namespace},
		Spec:       v1.FunctionJobSpec{FunctionRef: &v1.LocalObjectReference{Name: fn.Name}, RunID: 1, Event: &apiextensionsv1.JSON{Raw: []byte(`{"a":1}`)}},
	}
	for _, o := range []client.Object{event, cron, fj} {
		if err := c.Create(ctx, o); err != nil { // defaults filled by the API server, as in the reconcilers
			t.Fatal(err)
		}
	}
	build, err := scaling.MakeBuildJob(scaling.BuildTarget{Namespace: fn.Namespace, Name: fn.Name, Label: scaling.LabelFunction, Source: *fn.Spec.Source}, opts)
	if err != nil {
		t.Fatal(err)
	}
	rev := scaling.MakeRevision(fn, 1)
	rev.UID, rev.Status.Image = "rev-uid-1", "registry/img:sha-1" // children's owner references need a UID
	asCreated := rev.DeepCopy()
	asCreated.UID = ""
	objs := []client.Object{
		asCreated,
		scaling.MakeDeployment(fn, rev, nil, opts),
		scaling.MakeService(rev),
		scaling.MakeHTTPScaledObject(fn, rev, true, opts),
		scaling.MakeScaledJob(event, fn, opts),
		scaling.MakeTriggerAuthentication(event),
		scaling.MakeCronJob(cron, fn, opts),
		build,
		scaling.MakeBuildNetworkPolicy(opts.Build, scaling.BuildReach{
			Endpoints: []scaling.BuildEndpoint{
				{Namespace: opts.Build.Namespace, Selector: map[string]string{"app": "registry"}, Ports: []intstr.IntOrString{intstr.FromInt32(5000)}},
				{Prefixes: []netip.Prefix{netip.MustParsePrefix("10.244.0.1/32"), netip.MustParsePrefix("fd00::5/128")}, Ports: []intstr.IntOrString{intstr.FromString("s3")}},
			},
			Never: []netip.Prefix{netip.MustParsePrefix("34.118.0.10/32")},
		}),
		scaling.MakeRunJob(fj, &fn.Spec.CodeSpec, "registry/img:sha-1", opts),
		scaling.MakeSecretReaderServiceAccount(fn),
		scaling.MakeSecretReaderRole(fn),
		scaling.MakeSecretReaderRoleBinding(fn, opts),
		scaling.MakeIdentitySecret(fn, opts),
	}
	for _, p := range scaling.MakeTenantNetworkPolicies(fn.Namespace, opts) {
		objs = append(objs, p)
	}
	for _, o := range objs {
		gvk, err := apiutil.GVKForObject(o, env.Scheme)
		if err != nil {
			t.Fatal(err)
		}
		o.GetObjectKind().SetGroupVersionKind(gvk)
		t.Run(gvk.Kind, func(t *testing.T) {
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: m}), client.FieldOwner("sless-test"), client.ForceOwnership); err != nil {
				t.Fatalf("server-side apply of %s %s: %v", gvk.Kind, o.GetName(), err)
			}
		})
	}
}
