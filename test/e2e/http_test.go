//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	httpv1alpha1 "github.com/kedacore/http-add-on/operator/apis/http/v1alpha1"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
	"sless.dev/sless/scaling"
)

// helloPython greets; at path /secret it answers the secret it was given instead (a
// variable and a file: TestSecretsJourney runs a copy of this shared build).
const helloPython = `import os

def handle(event, request=None):
    if (request or {}).get("path") == "/secret":
        v = os.environ.get("DB_PASSWORD", "")
        try:
            f = open("/var/sless/secrets/db/password").read()
        except Exception as e:
            f = type(e).__name__
        if (request.get("query") or {}).get("print"):
            print("connecting with " + v, flush=True)
        return {"env": v, "file": f}
    return {"message": "hello, " + (event or {}).get("name", "world"), "method": (request or {}).get("method")}
`

const coldStartHeader = "X-Sless-Cold-Start"

// helloFields is a Python function that scales to zero after scaleDown seconds idle.
func helloFields(scaleDown int32) api.FunctionFields {
	return api.FunctionFields{Runtime: ptr.To("python3.11"), TimeoutSec: ptr.To(int32(30)), MinReplicas: ptr.To(int32(0)),
		MaxReplicas: ptr.To(int32(2)), ScaleDownPeriodSec: ptr.To(scaleDown)}
}

// checkHello asserts a 200 with the handler's output and returns whether the interceptor
// reported a cold start.
func checkHello(t *testing.T, resp *http.Response, body, name string) bool {
	t.Helper()
	var out struct{ Message, Method string }
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &out) != nil || out.Message != "hello, "+name || out.Method != "POST" {
		t.Fatalf("invoke: %d %q, want 200 with the handler's greeting for %s", resp.StatusCode, body, name)
	}
	return resp.Header.Get(coldStartHeader) == "true"
}

// TestScaleFromZeroAndBack is journeys 1 and 2: source through the REST API → kaniko build
// (stand-in) → Ready at zero replicas → a request held by the real interceptor while KEDA
// scales 0→1 → 200 from the handler with the cold-start header → history row; then idle
// past the scale-down period → KEDA scales to zero, the process is gone → the next request
// cold-starts again.
func TestScaleFromZeroAndBack(t *testing.T) {
	t.Parallel()
	tn := newTenant(t)
	ctx := context.Background()
	deployFunction(t, tn, "hello", helloFields(5), map[string]string{"handler.py": helloPython})

	d := deployment(t, tn.ns, "hello")
	if *d.Spec.Replicas != 0 || len(pods(t, tn.ns, "hello")) != 0 {
		t.Fatalf("a Ready function at min 0 has %d replicas and %d pods, want none", *d.Spec.Replicas, len(pods(t, tn.ns, "hello")))
	}
	rw := watchReplicas(t, tn.ns, "hello")

	t0 := time.Now()
	resp, body := invoke(t, tn, "hello", `{"name": "e2e"}`)
	took := time.Since(t0)
	if !checkHello(t, resp, body, "e2e") {
		t.Errorf("first request at zero replicas: %s header %q, want true", coldStartHeader, resp.Header.Get(coldStartHeader))
	}
	up, ok := rw.scaledUpAfter(t0)
	if !ok {
		t.Fatal("the request was answered but KEDA never raised replicas above 0")
	}
	t.Logf("cold start through gateway → interceptor → KEDA → pod: %s (KEDA raised replicas after %s)", fmtDur(took), fmtDur(up.Sub(t0)))

	// Warm: the same pod answers without a cold start.
	resp, body = invoke(t, tn, "hello", `{"name": "warm"}`)
	if checkHello(t, resp, body, "warm") {
		t.Error("second request reported a cold start; the pod should be warm")
	}

	waitFor(t, 30*time.Second, "invocation history rows", func() bool {
		inv, err := tn.c.ListInvocations(ctx, tn.ns, "hello", 10, "")
		if err != nil || len(inv.Invocations) < 2 {
			return false
		}
		for _, i := range inv.Invocations {
			if i.HTTPStatus != http.StatusOK || i.Kind != "http" {
				t.Fatalf("history row %+v, want kind http and status 200", i)
			}
		}
		// Newest first: the warm call, then the cold one.
		if inv.Invocations[0].ColdStart || !inv.Invocations[len(inv.Invocations)-1].ColdStart {
			t.Fatalf("history cold_start: %+v, want the first call cold and the second warm", inv.Invocations)
		}
		return true
	})

	// Journey 2: idle past scaledownPeriod (5 s) → KEDA scales to zero, the process ends.
	p := pods(t, tn.ns, "hello")
	if len(p) != 1 || p[0].Status.PodIP == "" {
		t.Fatalf("want one running pod with an address, got %d", len(p))
	}
	podURL := "http://" + p[0].Status.PodIP + ":8080/healthz"
	idle := time.Now()
	waitScaledToZero(t, tn.ns, "hello", 90*time.Second)
	t.Logf("idle → zero replicas and no pods after %s (scaledownPeriod 5 s)", fmtDur(time.Since(idle)))
	if resp, err := (&http.Client{Timeout: time.Second}).Get(podURL); err == nil {
		resp.Body.Close()
		t.Fatalf("the function process still answers at %s after scale to zero", podURL)
	}
	t1 := time.Now()
	resp, body = invoke(t, tn, "hello", `{"name": "again"}`)
	if !checkHello(t, resp, body, "again") {
		t.Errorf("request after scale to zero: %s header %q, want true", coldStartHeader, resp.Header.Get(coldStartHeader))
	}
	if _, ok := rw.scaledUpAfter(t1); !ok {
		t.Error("second cold start without KEDA raising replicas")
	}
}

// scaledObject reads the ScaledObject the add-on generated for a function's revision.
func scaledObject(t *testing.T, ns, name string) (*kedav1alpha1.ScaledObject, error) {
	t.Helper()
	var so kedav1alpha1.ScaledObject
	err := g.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: workload(t, ns, name)}, &so)
	return &so, err
}

// TestHTTPTriggerToggle is journey 5 for HTTP: a disabled http trigger pauses KEDA at zero
// replicas (the paused-replicas annotation travels HTTPScaledObject → ScaledObject) and the
// gateway answers 503; a request sent straight to the interceptor is held but wakes nothing.
// Enabling it again scales from zero on the next request, in place.
func TestHTTPTriggerToggle(t *testing.T) {
	t.Parallel()
	tn := newTenant(t)
	ctx := context.Background()
	deployHello(t, tn, "toggle", helloFields(5))
	so, err := scaledObject(t, tn.ns, "toggle")
	if err != nil {
		t.Fatal(err)
	}
	uid := so.UID
	if _, err := tn.c.CreateTrigger(ctx, tn.ns, api.CreateTrigger{Name: "web", TriggerFields: api.TriggerFields{
		Type: ptr.To("http"), Function: ptr.To("toggle"), Enabled: ptr.To(false)}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "KEDA to report the ScaledObject paused", func() bool {
		replicas, annotated, paused, read := pausedState(t, tn.ns, "toggle")
		return read && annotated && replicas == "0" && paused
	})
	rw := watchReplicas(t, tn.ns, "toggle")
	resp, body := invoke(t, tn, "toggle", `{}`)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("disabled function through the gateway: %d %q, want 503", resp.StatusCode, body)
	}
	// Straight to the interceptor, as a caller inside the cluster could: held, never served.
	t0 := time.Now()
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:"+strconv.Itoa(interceptorProxyPort)+"/", strings.NewReader(`{}`))
	req.Host = rules.RevisionHost(tn.ns, workload(t, tn.ns, "toggle"), rules.DefaultDomain)
	if resp, err := (&http.Client{Timeout: 8 * time.Second}).Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("a paused function answered 200 through the interceptor")
		}
	}
	if at, ok := rw.scaledUpAfter(t0); ok {
		t.Fatalf("KEDA scaled a paused function up after %s", at.Sub(t0))
	}
	if n := len(pods(t, tn.ns, "toggle")); n != 0 {
		t.Fatalf("paused function has %d pods", n)
	}

	if _, err := tn.c.SetTriggerEnabled(ctx, tn.ns, "web", true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "ScaledObject unpaused", func() bool {
		_, annotated, paused, read := pausedState(t, tn.ns, "toggle")
		return read && !annotated && !paused
	})
	resp, body = invoke(t, tn, "toggle", `{"name": "back"}`)
	if !checkHello(t, resp, body, "back") {
		t.Errorf("re-enabled function: %s header %q, want a cold start", coldStartHeader, resp.Header.Get(coldStartHeader))
	}
	if so, err := scaledObject(t, tn.ns, "toggle"); err != nil || so.UID != uid {
		t.Errorf("the toggle re-created the ScaledObject (uid %s → %s, %v); it must change in place", uid, so.UID, err)
	}
}

// pausedState reads the function's ScaledObject: the paused-replicas annotation the operator
// sets, and whether KEDA reports it Paused; read is false when it cannot be read.
func pausedState(t *testing.T, ns, name string) (replicas string, annotated, paused, read bool) {
	so, err := scaledObject(t, ns, name)
	if err != nil {
		return "", false, false, false
	}
	replicas, annotated = so.Annotations[scaling.AnnotationPausedReplicas]
	c := so.Status.Conditions.GetPausedCondition()
	return replicas, annotated, c.IsTrue(), true
}

// TestDeleteFunction is journey 6: deleting a warm Function through the API removes its
// Deployment, Service, HTTPScaledObject, ScaledObject and pods by owner references,
// collected by kube-controller-manager's real garbage collector.
func TestDeleteFunction(t *testing.T) {
	t.Parallel()
	tn := newTenant(t)
	ctx := context.Background()
	deployHello(t, tn, "doomed", helloFields(60))
	resp, body := invoke(t, tn, "doomed", `{"name": "x"}`)
	checkHello(t, resp, body, "x")
	if len(pods(t, tn.ns, "doomed")) != 1 {
		t.Fatal("want one warm pod before deleting")
	}
	if err := tn.c.DeleteFunction(ctx, tn.ns, "doomed"); err != nil {
		t.Fatal(err)
	}
	key, rev := client.ObjectKey{Namespace: tn.ns, Name: "doomed"}, client.ObjectKey{Namespace: tn.ns, Name: workload(t, tn.ns, "doomed")}
	gone := func(key client.ObjectKey, obj client.Object) func() bool {
		return func() bool { return apierrors.IsNotFound(g.client.Get(ctx, key, obj)) }
	}
	waitFor(t, time.Minute, "Function doomed deleted", gone(key, &v1.Function{}))
	for what, obj := range map[string]client.Object{
		"Revision": &v1.Revision{}, "Deployment": &appsv1.Deployment{}, "Service": &corev1.Service{},
		"HTTPScaledObject": &httpv1alpha1.HTTPScaledObject{}, "ScaledObject": &kedav1alpha1.ScaledObject{},
	} {
		waitFor(t, time.Minute, what+" "+rev.Name+" deleted", gone(rev, obj))
	}
	waitFor(t, time.Minute, "pods of doomed gone", func() bool { return len(pods(t, tn.ns, "doomed")) == 0 })
	resp, _ = invoke(t, tn, "doomed", `{}`)
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("deleted function through the gateway: %d, want 404", resp.StatusCode)
	}
}
