//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"k8s.io/utils/ptr"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/test/testkit"
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

// streamNode streams three lines 0.8 s apart from an async generator.
const streamNode = `exports.handle = async function* () {
  for (let i = 0; i < 3; i++) {
    if (i) await new Promise((resolve) => setTimeout(resolve, 800));
    yield 'chunk ' + i + '\n';
  }
};
`

// TestStreamsOnTheCluster: a kaniko-built Python generator and a Node.js async generator
// stream through the gateway and the real interceptor from zero, each item as it is produced
// (the times between them are asserted, not just the body); a stream that goes silent is
// ended cleanly at the function's stream_idle_timeout_sec; and a stream that outlives the
// scale-down period holds its pod — a live stream is a request in flight to the add-on.
func TestStreamsOnTheCluster(t *testing.T) {
	t.Parallel()
	tn := newTenant(t)
	scale := api.FunctionFields{TimeoutSec: ptr.To(int32(60)), StreamIdleTimeoutSec: ptr.To(int32(2)), ScaleDownPeriodSec: ptr.To(int32(3))}
	py, node := scale, scale
	py.Runtime, node.Runtime = ptr.To("python3.11"), ptr.To("nodejs20")
	createAndUpload(t, tn, "ticks", py, map[string]string{"handler.py": streamPython})
	createAndUpload(t, tn, "nodeticks", node, map[string]string{"handler.js": streamNode})
	ns, name := tn.ns, "ticks"
	for _, fn := range []string{name, "nodeticks"} {
		waitReady(t, tn, fn)
		waitServiceResolvable(t, tn, fn)
		waitScaledToZero(t, ns, fn, 2*time.Minute)
	}

	// stream reads fn's answer to body line by line and when each line came, failing on a
	// read error (a stream's end is clean, whether the function's or the gateway's).
	stream := func(fn, body string) (*http.Response, []string, []time.Duration) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, g.gatewayURL+"/fn/"+ns+"/"+fn, strings.NewReader(body))
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

	events := func(body string) (*http.Response, []string, []time.Duration) { return stream(name, body) }

	resp, lines, at := stream("nodeticks", `{}`)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Sless-Cold-Start") != "true" || strings.Join(lines, "|") != "chunk 0|chunk 1|chunk 2" || at[2]-at[0] < 1200*time.Millisecond {
		t.Errorf("Node.js from zero: %d, cold start %q, %q at %v; want three chunks 0.8 s apart", resp.StatusCode, resp.Header.Get("X-Sless-Cold-Start"), lines, at)
	}

	resp, lines, at = events(`{"count": 3, "gap": 0.8}`)
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
	// The bound runs from when the gateway passed the event on; the test reads it a little
	// later (scheduling on a loaded machine), so the gap it sees may be shorter by that much.
	if len(at) == 2 && (at[1]-at[0] < 1800*time.Millisecond || at[1]-at[0] > 6*time.Second) {
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

// echoSocketGo is a Go function in the net/http form that answers a WebSocket upgrade and
// echoes text messages, with the standard library only (the ground's builds have no module
// proxy): the handshake of RFC 6455 §4.2.2 and single-frame text messages up to 125 bytes.
const echoSocketGo = `package handler

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"io"
	"net/http"
)

func Handle(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Upgrade") != "websocket" {
		http.Error(w, "want a WebSocket upgrade", http.StatusBadRequest)
		return
	}
	sum := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
		base64.StdEncoding.EncodeToString(sum[:]) + "\r\n\r\n")
	rw.Flush()
	for {
		msg, op, err := readFrame(rw.Reader)
		if err != nil {
			return
		}
		if op == 8 { // close: answered with the caller's status, as RFC 6455 §5.5.1 asks
			rw.Write(append([]byte{0x88, byte(len(msg))}, msg...))
			rw.Flush()
			return
		}
		out := append([]byte("echo: "), msg...)
		rw.Write(append([]byte{0x81, byte(len(out))}, out...))
		rw.Flush()
	}
}

// readFrame reads one masked client frame of up to 125 bytes.
func readFrame(r *bufio.Reader) ([]byte, byte, error) {
	var head [2]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, 0, err
	}
	var mask [4]byte
	if _, err := io.ReadFull(r, mask[:]); err != nil {
		return nil, 0, err
	}
	msg := make([]byte, head[1]&0x7f)
	if _, err := io.ReadFull(r, msg); err != nil {
		return nil, 0, err
	}
	for i := range msg {
		msg[i] ^= mask[i%4]
	}
	return msg, head[0] & 0x0f, nil
}
`

// TestWebSocketOnTheCluster: a WebSocket to a kaniko-built Go function in the net/http form
// passes through the gateway and the real interceptor from zero and echoes, and the socket
// holds its pod past the scale-down period while it is open, and the gateway ends it with a
// close frame once it is silent for the function's idle bound.
func TestWebSocketOnTheCluster(t *testing.T) {
	t.Parallel()
	tn := newTenant(t)
	const idle = 10 // s, past the 6 s the socket is silent below
	deployFunction(t, tn, "sock", api.FunctionFields{Runtime: ptr.To("go1.25"), ScaleDownPeriodSec: ptr.To(int32(3)), StreamIdleTimeoutSec: ptr.To(int32(idle))},
		map[string]string{"handler.go": echoSocketGo})
	waitScaledToZero(t, tn.ns, "sock", 2*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(g.gatewayURL, "http")+"/fn/"+tn.ns+"/sock", nil)
	if err != nil {
		t.Fatalf("a WebSocket from zero through the gateway and the interceptor: %v", err)
	}
	defer c.CloseNow()
	if resp.Header.Get("X-Sless-Cold-Start") != "true" {
		t.Errorf("the upgrade did not start the function from zero: %v", resp.Header)
	}
	var wrote time.Time
	for i, msg := range []string{"one", "two after the scale-down period"} {
		if i > 0 {
			time.Sleep(6 * time.Second) // past the 3 s scale-down period and KEDA's polling
			if d := deployment(t, tn.ns, "sock"); d.Status.ReadyReplicas < 1 {
				t.Fatalf("the function scaled away while its socket was open: %d ready", d.Status.ReadyReplicas)
			}
		}
		wrote = time.Now()
		if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		if _, got, err := c.Read(ctx); err != nil || string(got) != "echo: "+msg {
			t.Fatalf("echo of %q: %q, %v", msg, got, err)
		}
	}
	// Silent past its idle bound: the gateway ends the socket with a close frame.
	testkit.WantIdleClose(ctx, t, c, idle, wrote)
}
