//go:build e2e

package e2e

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"sless.dev/sless/gateway/api"
)

// streamPython streams Server-Sent Events: count events gap seconds apart.
const streamPython = `import time


def handle(event):
    yield {"statusCode": 200, "headers": {"Content-Type": "text/event-stream"}}
    for i in range(event.get("count", 3)):
        if i:
            time.sleep(event.get("gap", 0.6))
        yield "tick %d" % i
`

// TestStreamsOnTheCluster: a kaniko-built Python generator streams through the gateway and
// the real interceptor from zero, each event as it is produced (the times between them are
// asserted, not just the body); a stream that goes silent is ended cleanly at the function's
// stream_idle_timeout_sec; and a stream that outlives the scale-down period holds its pod —
// a live stream is a request in flight to the add-on.
func TestStreamsOnTheCluster(t *testing.T) {
	t.Parallel()
	tn := newTenant(t)
	deployFunction(t, tn, "ticks", api.FunctionFields{Runtime: ptr.To("python3.11"), TimeoutSec: ptr.To(int32(60)),
		StreamIdleTimeoutSec: ptr.To(int32(2)), ScaleDownPeriodSec: ptr.To(int32(3))}, map[string]string{"handler.py": streamPython})
	ns, name := tn.ns, "ticks"
	waitScaledToZero(t, ns, name, 2*time.Minute)

	// events reads a stream's lines and when each came, failing on a read error (a stream's
	// end is clean, whether the function's or the gateway's).
	events := func(body string) (*http.Response, []string, []time.Duration) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, g.gatewayURL+"/fn/"+ns+"/ticks", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Timeout: 3 * time.Minute}).Do(req)
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		defer resp.Body.Close()
		var lines []string
		var at []time.Duration
		start := time.Now()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if sc.Text() != "" {
				lines, at = append(lines, sc.Text()), append(at, time.Since(start))
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatalf("the stream broke after %q: %v", lines, err)
		}
		return resp, lines, at
	}

	resp, lines, at := events(`{"count": 3, "gap": 0.8}`)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Sless-Cold-Start") != "true" || strings.Join(lines, "|") != "data: tick 0|data: tick 1|data: tick 2" {
		t.Fatalf("from zero: %d, cold start %q, %q", resp.StatusCode, resp.Header.Get("X-Sless-Cold-Start"), lines)
	}
	// 0.8 s between events: the last came at least 1.2 s after the first, not with it.
	if at[2]-at[0] < 1200*time.Millisecond {
		t.Errorf("events arrived at %v: buffered on the way, not streamed", at)
	}
	t.Logf("from zero through the gateway and the interceptor: events at %v after the header", at)

	// Silent for longer than the 2 s bound: one event, then the gateway's clean end.
	_, lines, at = events(`{"count": 2, "gap": 8}`)
	if strings.Join(lines, "|") != "data: tick 0|: stream idle for 2s; ended by the gateway" {
		t.Errorf("idle stream: %q", lines)
	}
	if len(at) == 2 && (at[1]-at[0] < 2*time.Second || at[1]-at[0] > 6*time.Second) {
		t.Errorf("the idle stream was ended %s after its event, want its 2 s bound", at[1]-at[0])
	}

	// A stream of 12 s against a 3 s scale-down period: its pod stays while it lives.
	done := make(chan []string, 1)
	go func() {
		_, lines, _ := events(`{"count": 13, "gap": 1}`)
		done <- lines
	}()
	time.Sleep(2 * time.Second)
	for range 8 {
		if d := deployment(t, ns, name); d.Status.ReadyReplicas < 1 || ptr.Deref(d.Spec.Replicas, 0) < 1 {
			t.Fatalf("the function scaled away while a stream was open: %d ready of %d", d.Status.ReadyReplicas, ptr.Deref(d.Spec.Replicas, 0))
		}
		time.Sleep(time.Second)
	}
	if got := <-done; len(got) != 13 {
		t.Errorf("the long stream gave %d events, want 13: %q", len(got), got)
	}
}
