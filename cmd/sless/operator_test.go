package main

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/rules"
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

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := ln.Addr().String()
	ln.Close()
	cmd := newOperatorCmd()
	cmd.SetArgs([]string{"--metrics-bind-address=" + metricsAddr, "--health-probe-bind-address=127.0.0.1:0",
		"--leader-election-namespace=sless-system", "--artifacts-dir=" + t.TempDir(), "--log-level=warn",
		// No registry to resolve example.org/pre:1 from; allowed, or the policy refuses it.
		"--registries-skipping-tag-resolving=example.org", "--allowed-registries=example.org",
		"--build-egress=203.0.113.0/24:443,80", "--build-egress=10.20.0.5/32:5000"})
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
	// The build runs the operator's own image for its steps, under the policy the flags say.
	if img := job.Spec.Template.Spec.Containers[0].Image; img != selfImage {
		t.Errorf("push step image %s, want the operator's own %s", img, selfImage)
	}
	np := &networkingv1.NetworkPolicy{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "sless-system", Name: scaling.BuildNetworkPolicyName}, np); err != nil {
		t.Fatalf("no build NetworkPolicy: %v", err)
	}
	var blocks []string
	for _, r := range np.Spec.Egress {
		if b := r.To[0].IPBlock; b != nil {
			blocks = append(blocks, b.CIDR)
		}
	}
	if !slices.Contains(blocks, "203.0.113.0/24") || !slices.Contains(blocks, "10.20.0.5/32") || slices.Contains(blocks, "0.0.0.0/0") {
		t.Errorf("egress blocks %v, want the two --build-egress ranges instead of the default", blocks)
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
	// It made the master key at its start, gave each function a key derived from it and
	// the tenant namespace its NetworkPolicies.
	var master, fnKey corev1.Secret
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "sless-system", Name: "sless-identity"}, &master); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "tenant", Name: scaling.IdentitySecretName("pre")}, &fnKey); err != nil {
		t.Fatal(err)
	}
	m, _ := hex.DecodeString(string(master.Data["master"]))
	if string(fnKey.Data["key"]) != hex.EncodeToString(rules.FunctionKey(m, "tenant", "pre")) {
		t.Errorf("the function's key is not derived from the master in sless-identity")
	}
	for _, name := range []string{scaling.FunctionsNetworkPolicy, scaling.JobsNetworkPolicy} {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "tenant", Name: name}, &networkingv1.NetworkPolicy{}); err != nil {
			t.Errorf("NetworkPolicy %s: %v", name, err)
		}
	}
	operatorMetricsNeedAToken(t, env, metricsAddr)
	stopCommand(t, "operator", cancel, done)
}

// operatorMetricsNeedAToken: the operator's metrics (every tenant's objects in its series)
// are served only to a caller whose Kubernetes token may get /metrics: none is 401, a
// service account without the chart's sless-metrics-reader role 403, one bound to it 200.
func operatorMetricsNeedAToken(t *testing.T, env *testenv.Env, addr string) {
	t.Helper()
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	reader := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "sless-metrics-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	if err := env.Client.Create(ctx, reader); err != nil {
		t.Fatal(err)
	}
	token := func(name string, bound bool) string {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "tenant"}}
		if err := env.Client.Create(ctx, sa); err != nil {
			t.Fatal(err)
		}
		if bound {
			if err := env.Client.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader.Name},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: "tenant"}}}); err != nil {
				t.Fatal(err)
			}
		}
		tr, err := cs.CoreV1().ServiceAccounts("tenant").CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // the operator serves a self-signed certificate
	for _, tc := range []struct {
		who, token string
		want       int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a tenant's service account", token("tenant-pod", false), http.StatusForbidden},
		{"a scraper bound to sless-metrics-reader", token("scraper", true), http.StatusOK},
	} {
		var code int
		deadline := time.Now().Add(30 * time.Second)
		for { // the role binding reaches the API server's authorizer in a moment
			req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := hc.Do(req)
			if err == nil {
				resp.Body.Close()
				code = resp.StatusCode
			}
			if code == tc.want || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if code != tc.want {
			t.Errorf("the operator's /metrics for %s: %d, want %d", tc.who, code, tc.want)
		}
	}
}

// TestOperatorMetricsFlags: plain-HTTP metrics only on a loopback address.
func TestOperatorMetricsFlags(t *testing.T) {
	for addr, ok := range map[string]bool{"127.0.0.1:8080": true, "[::1]:8080": true, "0": true, ":8080": false, "0.0.0.0:8080": false, "10.0.0.7:8080": false, "localhost:8080": false} {
		if _, err := metricsOptions(addr, false); (err == nil) != ok {
			t.Errorf("--metrics-secure=false --metrics-bind-address=%s: %v, want allowed %v", addr, err, ok)
		}
	}
	if o, err := metricsOptions(":8443", true); err != nil || !o.SecureServing || o.FilterProvider == nil {
		t.Errorf("secure metrics: %+v, %v; want HTTPS with the authentication and authorization filter", o, err)
	}
}

// TestOperatorRefusesABadBuildEgress: a --build-egress the operator cannot read stops it at
// once, saying what to write instead.
func TestOperatorRefusesABadBuildEgress(t *testing.T) {
	for arg, want := range map[string]string{
		"--build-egress=registry.example:443": "want CIDR[:PORT,...]",
		"--build-egress=10.0.0.1/8":           "did you mean 10.0.0.0/8",
		"--build-egress=0.0.0.0/0:https":      "not a number from 1 to 65535",
	} {
		cmd := newOperatorCmd()
		cmd.SetArgs([]string{arg})
		cmd.SetErr(io.Discard)
		if err := cmd.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", arg, err, want)
		}
	}
}
