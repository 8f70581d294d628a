//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/scaling"
)

// crash SIGKILLs a running pod's container as the OOM killer or a failing node would: no
// SIGTERM, no drain. The kubelet then restarts it or fails the pod, per its restartPolicy.
func (k *kubelet) crash(uid types.UID) bool {
	k.mu.Lock()
	r := k.pods[uid]
	k.mu.Unlock()
	if r == nil {
		return false
	}
	r.stopMu.Lock()
	c := r.c
	r.stopMu.Unlock()
	return c != nil && c.cmd.Process != nil && c.cmd.Process.Signal(syscall.SIGKILL) == nil
}

// crash SIGKILLs the pod's container on whichever node runs it.
func (g *ground) crash(uid types.UID) bool {
	for _, k := range g.kubelets {
		if k.crash(uid) {
			return true
		}
	}
	return false
}

// crashPods SIGKILLs the running pods of the platform namespace whose name starts with
// prefix and returns how many.
func crashPods(t *testing.T, prefix string) int {
	t.Helper()
	var l corev1.PodList
	if err := g.client.List(context.Background(), &l, client.InNamespace("sless-system")); err != nil {
		t.Errorf("listing platform pods: %v", err)
		return 0
	}
	n := 0
	for _, p := range l.Items {
		if strings.HasPrefix(p.Name, prefix) && p.Status.Phase == corev1.PodRunning && g.crash(p.UID) {
			n++
		}
	}
	return n
}

// callAsync makes one asynchronous call under idempotency key, retrying while the gateway is
// down or refuses, and returns the invocation ID.
func callAsync(t *testing.T, tn tenant, fn, key, body string, within time.Duration) (string, error) {
	hc := &http.Client{Timeout: 30 * time.Second}
	deadline := time.Now().Add(within)
	for {
		req, err := http.NewRequest(http.MethodPost, g.gatewayURL+"/fn/"+tn.ns+"/"+fn, strings.NewReader(body))
		if err != nil {
			return "", err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Prefer", "respond-async")
		req.Header.Set("Idempotency-Key", key)
		resp, err := hc.Do(req)
		if err == nil {
			var inv api.AsyncInvocation
			derr := json.NewDecoder(resp.Body).Decode(&inv)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if (resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusOK) && derr == nil && inv.ID != "" {
				return inv.ID, nil
			}
			err = fmt.Errorf("answered %d", resp.StatusCode)
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("call %s: %w", key, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestAsyncInvocations is the asynchronous journey on the real KEDA: 500 calls with
// Prefer: respond-async to a function at zero are answered 202 by the gateway, queued on
// RabbitMQ and drained by dispatcher Jobs that KEDA's rabbitmq scaler starts in the platform
// namespace, through the interceptor that wakes the function. Midway the gateway and then
// every dispatcher are SIGKILLed: every accepted call still ends, failing ones in the
// dead-letter queue with their last error. Serial: the gateway it kills is every journey's.
func TestAsyncInvocations(t *testing.T) {
	const total = 500
	tn := newTenant(t)
	ctx := context.Background()
	fields := helloFields(5)
	fields.Async = &api.AsyncFields{Enabled: ptr.To(true), MaxAttempts: ptr.To(int32(2)), BackoffMs: ptr.To(int32(100))}
	deployShared(t, tn, "later", fields, map[string]string{"handler.py": recordingPython})
	waitFor(t, 2*time.Minute, "the operator to render the asynchronous dispatcher", func() bool {
		var fn v1.Function
		return g.client.Get(ctx, client.ObjectKey{Namespace: tn.ns, Name: "later"}, &fn) == nil &&
			meta.IsStatusConditionTrue(fn.Status.Conditions, v1.ConditionAsync)
	})
	ch := amqpChannel(t)
	queue := tn.ns + ".async.later"
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(queue, false, false, false)
		_, _ = ch.QueueDelete(queue+".dlq", false, false, false)
	})
	waitScaledToZero(t, tn.ns, "later", 3*time.Minute)

	failing := func(i int) bool { return i%100 == 42 }
	ids := make([]string, total)
	var accepted atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	work := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				body := fmt.Sprintf(`{"id": %d}`, i)
				if failing(i) {
					body = fmt.Sprintf(`{"id": %d, "fail": true}`, i)
				}
				id, err := callAsync(t, tn, "later", fmt.Sprintf("call-%d", i), body, 3*time.Minute)
				if err != nil {
					t.Error(err)
					continue
				}
				ids[i] = id
				accepted.Add(1)
			}
		}()
	}
	var gatewayCrashes, dispatcherCrashes atomic.Int64
	go func() {
		defer close(work)
		for i := range total {
			work <- i
			if i == total/3 {
				gatewayCrashes.Store(int64(crashPods(t, "sless-gateway-")))
			}
		}
	}()
	// The dispatchers are SIGKILLed once KEDA started some and calls are still queued.
	dispatchers := scaling.AsyncName(tn.ns, "later") + "-"
	waitFor(t, 3*time.Minute, "KEDA to start asynchronous dispatcher jobs", func() bool {
		if accepted.Load() < total/2 {
			return false
		}
		dispatcherCrashes.Add(int64(crashPods(t, dispatchers)))
		return dispatcherCrashes.Load() > 0
	})
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	acceptedIn := time.Since(start)
	if gatewayCrashes.Load() == 0 {
		t.Fatal("no gateway pod was crashed: the test proved nothing about it")
	}

	final := make([]api.AsyncInvocation, total)
	waitFor(t, 8*time.Minute, "every accepted invocation to finish", func() bool {
		for i, id := range ids {
			if final[i].Status == "succeeded" || final[i].Status == "failed" {
				continue
			}
			inv, err := tn.c.GetAsyncInvocation(ctx, tn.ns, id)
			if err != nil {
				return false // the gateway may be restarting
			}
			if final[i] = inv; inv.Status != "succeeded" && inv.Status != "failed" {
				return false
			}
		}
		return true
	})
	drained := time.Since(start)
	var dead int
	for i, inv := range final {
		switch {
		case failing(i) && (inv.Status != "failed" || inv.Attempts != 2 || !strings.Contains(inv.Error, "HTTP 500")):
			t.Errorf("failing call %d: %+v", i, inv)
		case failing(i):
			dead++
		case inv.Status != "succeeded" || inv.HTTPStatus != 200:
			t.Errorf("call %d: %+v", i, inv)
		}
	}
	seen, duplicates := readEvents(t, tn.ns, "later"), 0
	for i := range total {
		if !failing(i) && seen[i] == 0 {
			t.Errorf("call %d succeeded per its record, but the function never logged it", i)
		}
		duplicates += max(seen[i]-1, 0)
	}
	waitFor(t, time.Minute, "the failed calls in the dead-letter queue", func() bool { return queueDepth(t, ch, queue+".dlq") == dead })
	m, ok, err := ch.Get(queue+".dlq", false)
	if err != nil || !ok {
		t.Fatalf("dead letter: %v %v", ok, err)
	}
	if e, _ := m.Headers["x-sless-last-error"].(string); !strings.Contains(e, "HTTP 500") {
		t.Errorf("dead letter without its last error: %v", m.Headers)
	}
	t.Logf("%d asynchronous calls (%d failing) to a function at zero: accepted in %s, all final in %s (%.0f/s) after SIGKILLing %d gateway and %d dispatcher pods; %d duplicate runs (at least once)",
		total, dead, acceptedIn.Round(time.Millisecond), drained.Round(time.Millisecond), float64(total)/drained.Seconds(), gatewayCrashes.Load(), dispatcherCrashes.Load(), duplicates)
}
