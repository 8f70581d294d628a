//go:build e2e

package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"sless.dev/sless/gateway/api"
)

// slowPython holds each call for a quarter second, so concurrent calls pile up.
const slowPython = `import time

def handle(event):
    time.sleep(0.25)
    return "done"
`

// load sends calls to a function from workers goroutines until stop, counting answers.
type load struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	failures   map[string]int
	at         []string // when the first failures happened, to lay beside the ground's log
	workers    atomic.Int32
	wg         sync.WaitGroup
}

func (l *load) run(ctx context.Context, url string, workers int) {
	c := &http.Client{Timeout: time.Minute}
	for range workers {
		l.workers.Add(1)
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer l.workers.Add(-1)
			for ctx.Err() == nil {
				resp, err := c.Post(url, "application/json", strings.NewReader(`{}`))
				switch {
				case err != nil && ctx.Err() != nil:
					return // stopped mid-call: not an answer
				case err != nil:
					l.fail(err.Error())
				default:
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode/100 == 2 {
						l.ok.Add(1)
					} else {
						l.fail(resp.Status)
					}
				}
			}
		}()
	}
}

func (l *load) fail(why string) {
	l.failed.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failures == nil {
		l.failures = map[string]int{}
	}
	l.failures[why]++
	if len(l.at) < 10 {
		l.at = append(l.at, time.Now().UTC().Format("15:04:05.000")+" "+why)
	}
}

// TestScaleOutAndBack is the scale-out journey through the real HPA: load through the gateway
// makes a function with a small scaling target go 1→N (N ≥ 3, spread by kube-scheduler over
// all the nodes) — KEDA's ScaledObject, its HPA in kube-controller-manager, the external
// metric from KEDA's metrics API server through the aggregation layer, the add-on's scaler
// counting the interceptor's queue — then a light load keeps calling while the HPA brings it
// back to 1, and KEDA takes it to 0 once idle. Every call answers 2xx, for the concurrency and
// the requestRate metric alike.
func TestScaleOutAndBack(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		metric string
		target int32
	}{
		{"concurrency", 2},
		{"requestRate", 4},
	} {
		t.Run(tc.metric, func(t *testing.T) {
			t.Parallel()
			tn := newTenant(t)
			name := "burst-" + strings.ToLower(tc.metric)
			deployShared(t, tn, name, api.FunctionFields{Runtime: ptr.To("python3.11"), TimeoutSec: ptr.To(int32(30)),
				MinReplicas: ptr.To(int32(0)), MaxReplicas: ptr.To(int32(4)), ScaleDownPeriodSec: ptr.To(int32(5)),
				ScalingMetric: ptr.To(tc.metric), ScalingTarget: ptr.To(tc.target)}, map[string]string{"handler.py": slowPython})
			rw := watchReplicas(t, tn.ns, name)
			defer rw.stop()
			url := g.gatewayURL + "/fn/" + tn.ns + "/" + name
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			var l load
			start := time.Now()
			l.run(ctx, url, 16)
			var peak int32
			var reached time.Duration
			var spread map[string]int // ready pods per node, at the widest seen
			waitFor(t, 3*time.Minute, name+" scaled out to 3 or more ready replicas on all the nodes", func() bool {
				if r := rw.current(); r > peak {
					peak = r
				}
				if peak >= 3 && reached == 0 {
					reached = time.Since(start)
				}
				ready := readyPods(t, tn.ns, name)
				if n := nodesOf(ready); len(n) > len(spread) {
					spread = n
				}
				return peak >= 3 && len(ready) >= 3 && len(spread) == nodeCount
			})
			time.Sleep(5 * time.Second) // serve at N for a while
			if r := rw.current(); r > peak {
				peak = r
			}
			// Down to one worker: the HPA scales back while calls continue.
			lightCtx, stopLight := context.WithCancel(context.Background())
			defer stopLight()
			var light load
			light.run(lightCtx, url, 1)
			stop()
			l.wg.Wait()
			down := time.Now()
			waitFor(t, 3*time.Minute, name+" back to one replica under the light load", func() bool {
				return rw.current() == 1 && len(pods(t, tn.ns, name)) == 1
			})
			t.Logf("%s: 1→%d replicas (3 reached %s after the load began; ready pods per node %v), back to 1 in %s under a light load",
				tc.metric, peak, reached.Round(100*time.Millisecond), spread, time.Since(down).Round(100*time.Millisecond))
			stopLight()
			light.wg.Wait()
			idle := time.Now()
			waitScaledToZero(t, tn.ns, name, 2*time.Minute)
			t.Logf("%s: idle → zero in %s; calls: %d + %d answered 2xx, %d + %d failed",
				tc.metric, time.Since(idle).Round(100*time.Millisecond), l.ok.Load(), light.ok.Load(), l.failed.Load(), light.failed.Load())
			if l.failed.Load()+light.failed.Load() > 0 {
				t.Errorf("calls failed during scale-out or scale-in: %v %v (at %q %q)", l.failures, light.failures, l.at, light.at)
			}
			if l.ok.Load() == 0 || light.ok.Load() == 0 {
				t.Errorf("no call answered: heavy %d, light %d", l.ok.Load(), light.ok.Load())
			}
		})
	}
}

// current is the Deployment's latest replica count (-1 before any was seen).
func (rw *replicaWatch) current() int32 {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if len(rw.changes) == 0 {
		return -1
	}
	return rw.changes[len(rw.changes)-1].replicas
}

// readyPods lists the function's pods that are Ready and not being deleted.
func readyPods(t testing.TB, ns, name string) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods(t, ns, name) {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
				out = append(out, p)
			}
		}
	}
	return out
}

// nodesOf counts pods per node.
func nodesOf(ps []corev1.Pod) map[string]int {
	n := map[string]int{}
	for _, p := range ps {
		n[p.Spec.NodeName]++
	}
	return n
}
