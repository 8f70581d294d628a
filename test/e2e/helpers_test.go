//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway/api"
	slessclient "sless.dev/sless/gateway/client"
	"sless.dev/sless/rules"
	"sless.dev/sless/scaling"
	"sless.dev/sless/test/images"
	"sless.dev/sless/test/testkit"
)

// tenant is an identity on the gateway: its namespace and an API client.
type tenant struct {
	ns, token string
	c         *slessclient.Client
}

func newTenant(t testing.TB) tenant {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	sub := "e2e-" + hex.EncodeToString(b)
	claims := jwt.RegisteredClaims{Subject: sub, ExpiresAt: jwt.NewNumericDate(time.Now().Add(2 * time.Hour))}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(hmacKey))
	if err != nil {
		t.Fatal(err)
	}
	c, err := slessclient.New(g.gatewayURL, tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	tn := tenant{ns: api.TenantNamespace(sub), token: tok, c: c}
	if err := c.EnsureNamespace(context.Background(), tn.ns); err != nil {
		t.Fatal(err)
	}
	return tn
}

// deployFunction creates a function through the REST API, uploads its code and waits until
// it is Ready, with KEDA's ScaledObject for it in place.
func deployFunction(t testing.TB, tn tenant, name string, fields api.FunctionFields, files map[string]string) api.Function {
	t.Helper()
	createAndUpload(t, tn, name, fields, files)
	fn := waitReady(t, tn, name)
	waitServiceResolvable(t, tn, name)
	return fn
}

// sharedBuilds is one kaniko build per source, made by the first journey that needs it.
// Journeys whose point is what happens to a running function (triggers, deletion, pre-warm,
// scale-out, async calls) run a copy of it instead of building the same source again:
// builds are the suite's CPU, and the build journeys (TestFunctionImages, TestScaleFromZeroAndBack,
// the CLI's, Terraform's) prove building.
var sharedBuilds struct {
	mu     sync.Mutex
	byCode map[string]*sharedBuild
}

type sharedBuild struct {
	once  sync.Once
	image string // by digest; "" when the build failed
}

// deployHello deploys helloPython as name in tn from the shared build (deployShared).
func deployHello(t testing.TB, tn tenant, name string, fields api.FunctionFields) api.Function {
	t.Helper()
	return deployShared(t, tn, name, fields, map[string]string{"handler.py": helloPython})
}

// deployShared deploys files in fields' runtime as name in tn from the one shared build of
// that code: the image copied into tn's own repository (the one place of the platform
// registry imagepolicy lets tn's functions run), then Ready with KEDA's ScaledObject in place
// as deployFunction leaves it.
func deployShared(t testing.TB, tn tenant, name string, fields api.FunctionFields, files map[string]string) api.Function {
	t.Helper()
	code := ptr.Deref(fields.Runtime, "")
	for _, f := range slices.Sorted(maps.Keys(files)) {
		code += "\x00" + f + "\x00" + files[f]
	}
	sharedBuilds.mu.Lock()
	if sharedBuilds.byCode == nil {
		sharedBuilds.byCode = map[string]*sharedBuild{}
	}
	b := sharedBuilds.byCode[code]
	if b == nil {
		b = &sharedBuild{}
		sharedBuilds.byCode[code] = b
	}
	sharedBuilds.mu.Unlock()
	b.once.Do(func() {
		builder := newTenant(t)
		createAndUpload(t, builder, "shared", api.FunctionFields{Runtime: fields.Runtime, TimeoutSec: fields.TimeoutSec}, files)
		b.image = waitReady(t, builder, "shared").Status.Image
	})
	if b.image == "" {
		t.Fatal("the shared build of " + name + "'s code failed (see the first journey that deployed it)")
	}
	ctx := context.Background()
	src, err := images.Ref(b.image)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := images.Ref(registry + "/" + tn.ns + "/" + name + ":shared")
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(src, remote.WithContext(ctx))
	if err != nil {
		t.Fatalf("read the shared image: %v", err)
	}
	if err := remote.Write(dst, img, remote.WithContext(ctx), g.reg.Auth()); err != nil { // blobs mounted, not copied
		t.Fatalf("copy the shared image to %s: %v", dst, err)
	}
	fields.Image = ptr.To(dst.String())
	if _, err := tn.c.CreateFunction(ctx, tn.ns, api.CreateFunction{Name: name, FunctionFields: fields}); err != nil {
		t.Fatal(err)
	}
	fn := waitReady(t, tn, name)
	waitServiceResolvable(t, tn, name)
	return fn
}

// createAndUpload creates a function through the REST API and uploads its code.
func createAndUpload(t testing.TB, tn tenant, name string, fields api.FunctionFields, files map[string]string) {
	t.Helper()
	ctx := context.Background()
	if _, err := tn.c.CreateFunction(ctx, tn.ns, api.CreateFunction{Name: name, FunctionFields: fields}); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.c.UploadSource(ctx, tn.ns, name, bytes.NewReader(testkit.Zip(t, files))); err != nil {
		t.Fatal(err)
	}
}

// figureTest skips a test whose point is its figures unless SLESS_E2E_BENCH is set (make
// bench): CI runs the journeys that assert the same behaviour, not the measurement.
func figureTest(t *testing.T) {
	t.Helper()
	if os.Getenv("SLESS_E2E_BENCH") == "" {
		t.Skip("a figure test: run it with make bench (SLESS_E2E_BENCH=1)")
	}
}

// waitReady waits until the function is Ready (built by kaniko, deployed), failing at once
// when it fails.
func waitReady(t testing.TB, tn tenant, name string) api.Function {
	t.Helper()
	return waitBuilt(t, tn, name, "Ready", buildTimeout, func(fn api.Function) bool {
		if fn.Status.Phase == "Failed" {
			t.Fatalf("function %s failed: %s", name, fn.Status.Message)
		}
		return fn.Status.Ready
	})
}

// waitBuilt waits until done(function) after its build, allowing within from when the build
// may start: the journeys' builds take turns, and a wait for a slot is not counted.
func waitBuilt(t testing.TB, tn tenant, name, what string, within time.Duration, done func(api.Function) bool) api.Function {
	t.Helper()
	start := time.Now()
	var fn api.Function
	var queued time.Duration
	last := start
	for {
		var err error
		fn, err = tn.c.GetFunction(context.Background(), tn.ns, name)
		now := time.Now()
		if err == nil && strings.HasPrefix(fn.Status.Message, rules.BuildSlotWait) {
			queued += now.Sub(last)
		}
		last = now
		switch {
		case err == nil && done(fn):
			t.Logf("%s: %s (kaniko build) after %s more, %s of it waiting for a build slot", name, what, now.Sub(start).Round(time.Millisecond), queued.Round(time.Millisecond))
			return fn
		case now.Sub(start)-queued > within:
			t.Fatalf("timed out after %s (and %s waiting for a build slot) waiting for function %s %s: %+v", within, queued.Round(time.Second), name, what, fn.Status)
		}
		if err := g.exited(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// workload names the objects (Deployment, Service, HTTPScaledObject, ScaledObject) that run
// function name: those of its newest ready revision.
func workload(t testing.TB, ns, name string) string {
	t.Helper()
	var fn v1alpha1.Function
	if err := g.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &fn); err != nil {
		t.Fatal(err)
	}
	if fn.Status.LatestReadyRevision == "" {
		t.Fatalf("function %s has no ready revision", name)
	}
	return fn.Status.LatestReadyRevision
}

// waitServiceResolvable waits until a request can wake the function: KEDA has taken up the
// ScaledObject the add-on made from its revision's HTTPScaledObject, and its Service name
// resolves.
func waitServiceResolvable(t testing.TB, tn tenant, name string) {
	t.Helper()
	ctx := context.Background()
	name = workload(t, tn.ns, name)
	waitFor(t, time.Minute, "KEDA ScaledObject for "+name+" ready", func() bool {
		var so kedav1alpha1.ScaledObject
		if err := g.client.Get(ctx, client.ObjectKey{Namespace: tn.ns, Name: name}, &so); err != nil {
			return false
		}
		ready := so.Status.Conditions.GetReadyCondition()
		return ready.IsTrue()
	})
	// Go's resolver rereads /etc/hosts at most every 5 s: a Service younger than that may not
	// resolve yet in the interceptor, which a real cluster's DNS would not show.
	var svc corev1.Service
	if err := g.client.Get(ctx, client.ObjectKey{Namespace: tn.ns, Name: name}, &svc); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(svc.CreationTimestamp.Add(7 * time.Second)))
}

// invoke sends one request through the gateway's /fn/ route.
func invoke(t testing.TB, tn tenant, name, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.gatewayURL+"/fn/"+tn.ns+"/"+name, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 3 * time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("invoke %s: %v", name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// deployment reads the Deployment running function name (its newest ready revision's).
func deployment(t testing.TB, ns, name string) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	if err := g.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: workload(t, ns, name)}, &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

// pods lists the function's pods that are not being deleted.
func pods(t testing.TB, ns, name string) []corev1.Pod {
	t.Helper()
	var l corev1.PodList
	if err := g.client.List(context.Background(), &l, client.InNamespace(ns), client.MatchingLabels{scaling.LabelFunction: name}); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// waitScaledToZero waits until KEDA has set replicas to 0 and every pod (and so every
// process) is gone.
func waitScaledToZero(t testing.TB, ns, name string, within time.Duration) {
	t.Helper()
	waitFor(t, within, name+" scaled to zero with no pods", func() bool {
		d := deployment(t, ns, name)
		return d.Spec.Replicas != nil && *d.Spec.Replicas == 0 && d.Status.Replicas == 0 && len(pods(t, ns, name)) == 0
	})
}

func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if err := g.exited(); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// replicaWatch records when the Deployment's desired replicas change (KEDA's decisions).
type replicaWatch struct {
	mu      sync.Mutex
	changes []replicaChange
	stop    func()
}

type replicaChange struct {
	at       time.Time
	replicas int32
}

func watchReplicas(t testing.TB, ns, name string) *replicaWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := g.cs.AppsV1().Deployments(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + workload(t, ns, name)})
	if err != nil {
		t.Fatal(err)
	}
	rw := &replicaWatch{stop: cancel}
	go func() {
		last := int32(-1)
		for ev := range w.ResultChan() {
			d, ok := ev.Object.(*appsv1.Deployment)
			if !ok || ev.Type == watch.Deleted || d.Spec.Replicas == nil {
				continue
			}
			if r := *d.Spec.Replicas; r != last {
				last = r
				rw.mu.Lock()
				rw.changes = append(rw.changes, replicaChange{at: time.Now(), replicas: r})
				rw.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { cancel(); w.Stop() })
	return rw
}

// scaledUpAfter is when replicas first went above zero after t0.
func (rw *replicaWatch) scaledUpAfter(t0 time.Time) (time.Time, bool) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	for _, c := range rw.changes {
		if c.at.After(t0) && c.replicas > 0 {
			return c.at, true
		}
	}
	return time.Time{}, false
}

// podAfter finds the function's pod created after t0 and its kubelet marks.
func podAfter(t testing.TB, ns, name string, t0 time.Time) (string, map[string]time.Time) {
	t.Helper()
	for _, p := range pods(t, ns, name) {
		if !p.CreationTimestamp.Time.Before(t0.Truncate(time.Second)) {
			key := p.Namespace + "/" + p.Name
			return key, g.marks.get(key)
		}
	}
	return "", nil
}

func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}
