//go:build e2e

package e2e

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
	"sless.dev/sless/scaling"
)

// identityMaster is the platform's master key, as the operator or the gateway made it at
// their first start in the platform namespace.
func identityMaster(t testing.TB) []byte {
	t.Helper()
	var s corev1.Secret
	if err := g.client.Get(context.Background(), client.ObjectKey{Namespace: "sless-system", Name: "sless-identity"}, &s); err != nil {
		t.Fatal(err)
	}
	master, err := hex.DecodeString(string(s.Data[scaling.IdentityMasterField]))
	if err != nil || len(master) != rules.IdentityMasterBytes {
		t.Fatalf("sless-identity holds no master key (%v)", err)
	}
	return master
}

// signing signs each request with key as it goes out, after the caller's own headers (a
// call the platform makes: for the figures of paths around the gateway).
type signing struct {
	key []byte
	rt  http.RoundTripper
}

func (s signing) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	rules.SignRequest(r, s.key, time.Now())
	return s.rt.RoundTrip(r)
}

// TestSignedCallsOnTheCluster is issue 51's item 4 end to end, on the real interceptor and a
// kaniko-built wrapper: a caller that goes around the gateway — here straight to the
// interceptor with the function's host, as any pod of the cluster could, whether or not a
// CNI enforces the tenant's NetworkPolicies (this ground's does not) — cannot forge the
// caller of a require_auth function or skip its check: unsigned, signed for another tenant's
// function or stale, the function's wrapper refuses it (401) before the handler runs; the
// same call through the gateway, with the tenant's token, is served. A call the platform
// signed with the function's key passes the interceptor as well, so the refusals are the
// signature's. The function's key is the one derived from the master, in its own Secret,
// read by its pods by reference, and its namespace has its NetworkPolicies.
func TestSignedCallsOnTheCluster(t *testing.T) {
	t.Parallel()
	tn := newTenant(t)
	ctx := context.Background()
	deployHello(t, tn, "private", helloFields(30))
	if _, err := tn.c.CreateTrigger(ctx, tn.ns, api.CreateTrigger{Name: "web", TriggerFields: api.TriggerFields{
		Type: ptr.To("http"), Function: ptr.To("private"), RequireAuth: ptr.To(true)}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the gateway to require a token", func() bool {
		resp, _ := invoke(t, tn, "private", `{}`)
		return resp.StatusCode == http.StatusUnauthorized
	})
	call := func(url, host string, header http.Header) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"name": "e2e"}`))
		req.Host = host
		req.Header = header
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Timeout: 3 * time.Minute}).Do(req) // a cold start is held
		if err != nil {
			t.Fatalf("POST %s (Host %s): %v", url, host, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := call(g.gatewayURL+"/fn/"+tn.ns+"/private", "", http.Header{"Authorization": {"Bearer " + tn.token},
		"X-Sless-Subject": {"mallory"}}); code != http.StatusOK || !strings.Contains(body, "hello, e2e") {
		t.Fatalf("through the gateway with the tenant's token: %d %s, want the handler's 200", code, body)
	}

	master := identityMaster(t)
	key := rules.FunctionKey(master, tn.ns, "private")
	var secret corev1.Secret
	if err := g.client.Get(ctx, client.ObjectKey{Namespace: tn.ns, Name: scaling.IdentitySecretName("private")}, &secret); err != nil {
		t.Fatal(err)
	}
	if string(secret.Data["key"]) != hex.EncodeToString(key) {
		t.Fatal("the function's key Secret does not hold the key derived from the platform's master")
	}
	var dep appsv1.Deployment
	if err := g.client.Get(ctx, client.ObjectKey{Namespace: tn.ns, Name: workload(t, tn.ns, "private")}, &dep); err != nil {
		t.Fatal(err)
	}
	for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
		if e.Name == rules.EnvIdentityKey && (e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef.Name != secret.Name) {
			t.Errorf("the pod's %s is %+v, want a reference to %s", e.Name, e, secret.Name)
		}
	}
	for _, name := range []string{scaling.FunctionsNetworkPolicy, scaling.JobsNetworkPolicy} {
		if err := g.client.Get(ctx, client.ObjectKey{Namespace: tn.ns, Name: name}, &networkingv1.NetworkPolicy{}); err != nil {
			t.Errorf("NetworkPolicy %s of the tenant: %v", name, err)
		}
	}

	interceptor := "http://127.0.0.1:" + strconv.Itoa(interceptorProxyPort) + "/"
	host := rules.RevisionHost(tn.ns, workload(t, tn.ns, "private"), rules.DefaultDomain)
	identity := func() http.Header {
		return http.Header{"X-Sless-Subject": {"e2e-forged"}, "X-Sless-Namespace": {tn.ns}}
	}
	signed := func(k []byte, at time.Time) http.Header {
		h := identity()
		h.Set("Content-Type", "application/json") // as call sets it: not signed either way
		h.Set(rules.HeaderSignature, rules.Signature(k, at.Unix(), http.MethodPost, "/", h))
		return h
	}
	other := newTenant(t)
	for _, c := range []struct {
		name   string
		header http.Header
		want   int
	}{
		{"a forged caller, unsigned", identity(), http.StatusUnauthorized},
		{"no caller at all, unsigned", http.Header{}, http.StatusUnauthorized},
		{"signed with another tenant's function's key", signed(rules.FunctionKey(master, other.ns, "private"), time.Now()), http.StatusUnauthorized},
		{"signed with the function's key 20 minutes ago", signed(key, time.Now().Add(-20*time.Minute)), http.StatusUnauthorized},
		{"signed with the function's key, as the platform does", signed(key, time.Now()), http.StatusOK},
	} {
		code, body := call(interceptor, host, c.header)
		if code != c.want || c.want == http.StatusOK && !strings.Contains(body, "hello, e2e") ||
			c.want != http.StatusOK && (!strings.Contains(body, `"error"`) || strings.Contains(body, "hello")) {
			t.Errorf("%s, to the interceptor: %d %s, want %d", c.name, code, body, c.want)
		}
	}
}
