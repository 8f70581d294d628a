//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	httpv1alpha1 "github.com/kedacore/http-add-on/operator/apis/http/v1alpha1"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
)

// TestSecretsJourney: a function (the shared hello build) reads a secret from env and from its file on the real
// KEDA and add-on; nothing sless writes (Function, Deployment, pods' templates, HSO,
// ScaledObject, Events) holds the value, the logs API masks it; a rotation under ≥100 req/s
// for 30 s through the interceptor reaches every new answer with no non-2xx.
func TestSecretsJourney(t *testing.T) {
	t.Parallel()
	tn := newTenant(t)
	ctx := context.Background()
	const first, second = "marker-e2e-0f3a-first", "marker-e2e-77c1-second"
	if _, err := tn.c.CreateSecret(ctx, tn.ns, api.CreateSecret{Name: "db", SecretFields: api.SecretFields{Data: map[string]string{"password": first}}}); err != nil {
		t.Fatal(err)
	}
	fields := api.FunctionFields{Runtime: ptr.To("python3.11"), TimeoutSec: ptr.To(int32(30)), MinReplicas: ptr.To(int32(1)), MaxReplicas: ptr.To(int32(2)),
		SecretEnv:   &[]api.SecretEnv{{Name: "DB_PASSWORD", Secret: "db", Key: "password"}},
		SecretFiles: &[]api.SecretFile{{Secret: "db"}},
		Async:       &api.AsyncFields{Enabled: ptr.To(true), MaxAttempts: ptr.To(int32(1))}}
	deployHello(t, tn, "secretive", fields)
	secretURL := g.gatewayURL + "/fn/" + tn.ns + "/secretive/secret"
	read := func() (int, map[string]string) {
		resp, err := http.Get(secretURL + "?print=1")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]string
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	if code, got := read(); code != 200 || got["env"] != first || got["file"] != first {
		t.Fatalf("the function read %d %v, want the value from env and file", code, got)
	}

	// What a reader of the cluster's objects, Events and the logs API sees.
	waitFor(t, time.Minute, "the printed value masked in the logs API", func() bool {
		return strings.Contains(logsText(t, tn, "secretive"), "connecting with "+rules.SecretMask)
	})
	leaks := func(marker string) {
		t.Helper()
		var objs []any
		// The tenant's namespace, and the platform's, where its builds and its asynchronous
		// dispatcher run.
		for _, ns := range []string{tn.ns, "sless-system"} {
			for _, l := range []client.ObjectList{&v1alpha1.FunctionList{}, &v1alpha1.RevisionList{}, &appsv1.DeploymentList{}, &appsv1.ReplicaSetList{}, &corev1.PodList{},
				&corev1.ServiceList{}, &httpv1alpha1.HTTPScaledObjectList{}, &kedav1alpha1.ScaledObjectList{}, &kedav1alpha1.ScaledJobList{},
				&kedav1alpha1.TriggerAuthenticationList{}, &batchv1.JobList{}, &batchv1.CronJobList{}, &corev1.ServiceAccountList{},
				&rbacv1.RoleList{}, &rbacv1.RoleBindingList{}, &eventsv1.EventList{}, &corev1.EventList{}} {
				if err := g.client.List(ctx, l, client.InNamespace(ns)); err != nil {
					t.Fatal(err)
				}
				objs = append(objs, l)
			}
		}
		// What the API answers about the function and its invocations.
		fn, err := tn.c.GetFunction(ctx, tn.ns, "secretive")
		if err != nil {
			t.Fatal(err)
		}
		history, err := tn.c.ListInvocations(ctx, tn.ns, "secretive", 100, "")
		if err != nil {
			t.Fatal(err)
		}
		async, err := tn.c.ListAsyncInvocations(ctx, tn.ns, "secretive", "", 100)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, fn, history, async)
		out, err := yaml.Marshal(objs)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(out), marker) {
			t.Errorf("an object sless wrote, or an API answer, holds the secret's value")
		}
		if logs := logsText(t, tn, "secretive"); strings.Contains(logs, marker) {
			t.Errorf("the logs API shows the value: %s", logs)
		}
		// The platform's own logs (operator, gateway, KEDA, the add-on, the API server, the
		// kubelets): every log file but the function's own pods', which hold what it printed.
		_ = filepath.WalkDir(g.dir, func(path string, e fs.DirEntry, err error) error {
			if err != nil || !e.Type().IsRegular() || !strings.HasSuffix(path, ".log") || strings.Contains(filepath.Base(path), tn.ns+"_") {
				return nil
			}
			if data, err := os.ReadFile(path); err == nil && strings.Contains(string(data), marker) {
				t.Errorf("the platform's log %s holds the secret's value", path)
			}
			return nil
		})
	}
	leaks(first)
	asyncMasked(t, tn, "secretive", first)

	// Rotation under load: every answer is 2xx, and the new value arrives.
	var sent, bad, fresh atomic.Int64
	var firstBad atomic.Value
	stop := time.Now().Add(30 * time.Second)
	hc := &http.Client{Timeout: 30 * time.Second}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(65 * time.Millisecond) // 8 workers: ≈ 120 requests/s
			defer tick.Stop()
			for now := range tick.C {
				if now.After(stop) {
					return
				}
				sent.Add(1)
				// GET, a read: a request sent on a keep-alive connection the old pod closes
				// as it drains is retried by the interceptor's transport (a POST would not
				// be: it may have run).
				resp, err := hc.Get(secretURL)
				if err != nil {
					bad.Add(1)
					firstBad.CompareAndSwap(nil, err.Error())
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode/100 != 2 {
					bad.Add(1)
					firstBad.CompareAndSwap(nil, fmt.Sprintf("%d %s", resp.StatusCode, body))
				} else if strings.Contains(string(body), second) {
					fresh.Add(1)
				}
			}
		}()
	}
	time.Sleep(5 * time.Second)
	if s, err := tn.c.UpdateSecret(ctx, tn.ns, "db", api.SecretFields{Data: map[string]string{"password": second}}); err != nil || s.Version != 2 {
		t.Fatalf("rotate: %+v %v", s, err)
	}
	wg.Wait()
	rate := float64(sent.Load()) / 30
	t.Logf("rotation under load: %d requests (%.0f/s), %d non-2xx, %d with the new value", sent.Load(), rate, bad.Load(), fresh.Load())
	if rate < 100 || bad.Load() != 0 || fresh.Load() == 0 {
		t.Errorf("rate %.0f/s, %d non-2xx (first: %v), %d with the new value: want ≥ 100/s, 0 and some", rate, bad.Load(), firstBad.Load(), fresh.Load())
	}
	if code, got := read(); code != 200 || got["env"] != second || got["file"] != second {
		t.Errorf("after the rotation: %d %v", code, got)
	}
	leaks(second)

	// A missing key is a not-Ready status naming it; the running pods keep serving.
	if _, err := tn.c.UpdateFunction(ctx, tn.ns, "secretive", api.FunctionFields{SecretEnv: &[]api.SecretEnv{{Name: "DB_PASSWORD", Secret: "db", Key: "nope"}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "a status naming the missing key", func() bool {
		fn, err := tn.c.GetFunction(ctx, tn.ns, "secretive")
		return err == nil && !fn.Status.Ready && strings.Contains(fn.Status.Message, `has no key "nope"`)
	})
	if code, _ := read(); code != 200 {
		t.Errorf("the running function answered %d while its new spec waits for a key", code)
	}
}

// asyncMasked makes an asynchronous call of name's /secret and checks that the result the
// dispatcher kept (through the Role the operator grants it on the function's secrets) holds
// the value masked.
func asyncMasked(t *testing.T, tn tenant, name, marker string) {
	t.Helper()
	ctx := context.Background()
	waitFor(t, 2*time.Minute, "the operator to render the asynchronous dispatcher", func() bool {
		var fn v1alpha1.Function
		return g.client.Get(ctx, client.ObjectKey{Namespace: tn.ns, Name: name}, &fn) == nil &&
			meta.IsStatusConditionTrue(fn.Status.Conditions, v1alpha1.ConditionAsync)
	})
	t.Cleanup(func() {
		ch := amqpChannel(t)
		_, _ = ch.QueueDelete(rules.AsyncQueue(tn.ns, name), false, false, false)
		_, _ = ch.QueueDelete(rules.AsyncQueue(tn.ns, name)+".dlq", false, false, false)
	})
	id, err := callAsync(t, tn, name+"/secret", "masked-1", "{}", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var inv api.AsyncInvocation
	waitFor(t, 3*time.Minute, "the asynchronous call to finish", func() bool {
		inv, err = tn.c.GetAsyncInvocation(ctx, tn.ns, id)
		return err == nil && (inv.Status == "succeeded" || inv.Status == "failed")
	})
	var got map[string]string
	if inv.Status != "succeeded" || json.Unmarshal([]byte(inv.Result), &got) != nil || got["env"] != rules.SecretMask || got["file"] != rules.SecretMask {
		t.Errorf("asynchronous result %+v: want succeeded with both values masked", inv)
	}
	if strings.Contains(inv.Result+inv.Error, marker) {
		t.Errorf("the asynchronous result holds the secret's value: %+v", inv)
	}
}

// logsText is the function's log as the logs API answers it.
func logsText(t testing.TB, tn tenant, name string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, g.gatewayURL+"/v1/namespaces/"+tn.ns+"/functions/"+name+"/logs", nil)
	req.Header.Set("Authorization", "Bearer "+tn.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
