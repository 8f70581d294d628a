package devplane_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"k8s.io/utils/ptr"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/test/testkit"
)

// openStream POSTs body to url and returns the answer with its body unread.
func openStream(t *testing.T, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, b)
	}
	return resp
}

// lineTimes reads body line by line and says when each line arrived, from start; it fails
// the test on a read error (a stream's end must be clean).
func lineTimes(t *testing.T, body io.Reader, start time.Time) (lines []string, at []time.Duration) {
	t.Helper()
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		lines, at = append(lines, sc.Text()), append(at, time.Since(start))
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading the stream after %q: %v", lines, err)
	}
	return lines, at
}

// TestStreamsFromZero: the streaming journeys on sless dev, each from zero — a Python
// generator's chunks arrive as they are produced (not at the end), a silent event stream is
// ended cleanly at the function's stream_idle_timeout_sec with the gateway's comment, and a
// WebSocket to a Go net/http function echoes through the gateway and the pool while the
// socket holds its process past the scale-down period, and is ended with the gateway's close
// frame once silent for its idle bound.
func TestStreamsFromZero(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{})
	fnURL := func(name string) string { return d.endpoint + "/fn/" + d.ns + "/" + name }

	t.Run("python generator and idle bound", func(t *testing.T) {
		d.deploy("gen", "python3.11", dirFiles(t, filepath.Join("..", "buildkit", "testdata", "handlers", "python")),
			api.FunctionFields{ScaleDownPeriodSec: ptr.To[int32](1), StreamIdleTimeoutSec: ptr.To[int32](1)})
		start := time.Now()
		resp := openStream(t, fnURL("gen"), `{"action":"stream","count":3,"delay":0.6}`)
		lines, at := lineTimes(t, resp.Body, start)
		resp.Body.Close()
		if resp.Header.Get("X-Sless-Cold-Start") != "true" {
			t.Errorf("the first call did not start the function from zero: %v", resp.Header)
		}
		if strings.Join(lines, "|") != "chunk 0|chunk 1|chunk 2" {
			t.Fatalf("stream %q", lines)
		}
		// 0.6 s between items: the first came at least 1 s before the last, not with it.
		if at[2]-at[0] < time.Second {
			t.Errorf("chunks arrived at %v: buffered, not streamed", at)
		}

		// Two events 4 s apart with a 1 s idle bound: the first, then the gateway's end.
		start = time.Now()
		resp = openStream(t, fnURL("gen"), `{"action":"stream","sse":true,"count":2,"delay":4}`)
		lines, at = lineTimes(t, resp.Body, start)
		resp.Body.Close()
		took := time.Since(start) - at[0]
		want := "event: tick|id: 0|data: {\"i\":0}||: stream idle for 1s; ended by the gateway|"
		if strings.Join(lines, "|") != want {
			t.Errorf("idle stream %q, want %q", strings.Join(lines, "|"), want)
		}
		if took > 3*time.Second {
			t.Errorf("the idle stream ended %s after its first event: not at its 1 s bound", took)
		}
	})

	t.Run("websocket to a Go net/http function", func(t *testing.T) {
		const idle = 5 // s, past the 2.5 s the socket is silent below
		d.deploy("live", "go1.25", dirFiles(t, filepath.Join("..", "buildkit", "testdata", "handlers", "gohttp")),
			api.FunctionFields{ScaleDownPeriodSec: ptr.To[int32](1), StreamIdleTimeoutSec: ptr.To[int32](idle)})
		if s := d.stats("live"); s.Processes != 0 {
			t.Fatalf("min_replicas 0: no process before the first call, got %+v", s)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(fnURL("live"), "http")+"/ws", nil)
		if err != nil {
			t.Fatalf("websocket through sless dev: %v", err)
		}
		defer c.CloseNow()
		if resp.Header.Get("X-Sless-Cold-Start") != "true" {
			t.Errorf("the upgrade did not start the function from zero: %v", resp.Header)
		}
		echo := func(msg string) (wrote time.Time) {
			t.Helper()
			wrote = time.Now()
			if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
				t.Fatal(err)
			}
			if _, got, err := c.Read(ctx); err != nil || string(got) != "echo: "+msg {
				t.Fatalf("echo of %q: %q, %v", msg, got, err)
			}
			return wrote
		}
		echo("one")
		pids := d.stats("live").PIDs
		// Past the 1 s scale-down period: a live socket is a request in flight.
		time.Sleep(2500 * time.Millisecond)
		if now := d.stats("live").PIDs; len(now) != 1 || len(pids) != 1 || now[0] != pids[0] {
			t.Fatalf("the socket's process went away while it lived: %v then %v", pids, now)
		}
		wrote := echo("two")
		// Silent past its idle bound: the gateway ends the socket with a close frame.
		testkit.WantIdleClose(ctx, t, c, idle, wrote)
		testkit.WaitFor(t, "scale to zero once the socket closed", 10*time.Second, func() bool { return d.stats("live").Processes == 0 })
	})
}
