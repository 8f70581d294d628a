package buildkit

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// chunk is one piece of a streamed answer and when it arrived after the request was sent.
type chunk struct {
	text string
	at   time.Duration
}

// readStream posts event and reads the answer line by line as it arrives; err is what ended
// the body (nil for a complete one). Each call has a connection of its own.
func readStream(t *testing.T, url, event string) (*http.Response, []chunk, error) {
	t.Helper()
	start := time.Now()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(event))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", event, err)
	}
	defer resp.Body.Close()
	var chunks []chunk
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		if line != "" {
			chunks = append(chunks, chunk{line, time.Since(start)})
		}
		if err == io.EOF {
			return resp, chunks, nil
		}
		if err != nil {
			return resp, chunks, err
		}
	}
}

// streamEndsUsable: after a stream the function's timeout ended, the connection either was
// announced closed in the answer's header (Connection: close, so no client sends its next
// call on it) or still takes the next call. A pool that sent its next call on a connection
// the wrapper closes after the cut would fail that call (sless dev's 502).
func streamEndsUsable(t *testing.T, url string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	send := func(event string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(event))
		req.Header.Set("Content-Type", "application/json")
		if err := req.Write(conn); err != nil {
			return nil, err
		}
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			return nil, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp, err
	}
	resp, err := send(`{"action":"stream","count":10,"delay":0.4}`)
	if err != nil {
		t.Fatalf("the stream the timeout ends: %v", err)
	}
	if resp.Close {
		return
	}
	time.Sleep(200 * time.Millisecond) // the wrapper's close, if it makes one, arrives first
	if resp, err := send(`{"action":"stream","count":1}`); err != nil || resp.StatusCode != 200 {
		t.Errorf("the next call on the connection of a stream the timeout ended, kept alive by its header: %v", err)
	}
}

func joined(chunks []chunk) string {
	var b strings.Builder
	for _, c := range chunks {
		b.WriteString(c.text)
	}
	return b.String()
}

// testStreams is the streamed-response contract of a wrapper: each item leaves when it is
// produced (the chunk times, not only the body), a first response object sets status and
// headers, text/event-stream frames events, the timeout ends a stream cleanly and a failure
// after the first byte cuts it.
func testStreams(t *testing.T, art *Artifact) {
	fn := startFunction(t, art, "SLESS_TIMEOUT_SECONDS=2")
	for _, action := range []string{"stream", "astream"} {
		resp, chunks, err := readStream(t, fn.url, `{"action":"`+action+`","count":3,"delay":0.4}`)
		if err != nil || resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") || resp.ContentLength != -1 {
			t.Fatalf("%s: %d %q length %d, %v", action, resp.StatusCode, resp.Header.Get("Content-Type"), resp.ContentLength, err)
		}
		if got := joined(chunks); got != "chunk 0\nchunk 1\nchunk 2\n" {
			t.Errorf("%s body = %q", action, got)
		}
		// 0.8 s of sleeps between the first and the last item: a buffered answer arrives at once.
		if len(chunks) != 3 || chunks[2].at-chunks[0].at < 600*time.Millisecond {
			t.Errorf("%s: chunks arrived at %v: not streamed as produced", action, chunks)
		}
	}

	resp, chunks, err := readStream(t, fn.url, `{"action":"stream","count":4,"delay":0.05,"sse":true}`)
	want := "event: tick\nid: 0\ndata: {\"i\":0}\n\ndata: line 1\ndata: second\n\nevent: tick\nid: 2\ndata: {\"i\":2}\n\ndata: line 3\ndata: second\n\n"
	if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("X-Stream") != "yes" || joined(chunks) != want {
		t.Errorf("server-sent events: %d %v %v\n%q", resp.StatusCode, resp.Header, err, joined(chunks))
	}

	// The function's 2 s timeout ends a 4 s stream: cleanly, with a last comment.
	resp, chunks, err = readStream(t, fn.url, `{"action":"stream","count":10,"delay":0.4,"sse":true}`)
	if err != nil || resp.StatusCode != 200 || !strings.HasSuffix(joined(chunks), ": function timed out after 2s\n\n") {
		t.Errorf("timeout: %d %v\n%q", resp.StatusCode, err, joined(chunks))
	}
	if len(chunks) > 0 && chunks[len(chunks)-1].at > 3500*time.Millisecond {
		t.Errorf("the 2 s timeout ended the stream after %s", chunks[len(chunks)-1].at)
	}
	streamEndsUsable(t, fn.url)

	// A failure after the first item: the answer is cut, never complete.
	resp, chunks, err = readStream(t, fn.url, `{"action":"stream","count":3,"delay":0.1,"fail":true}`)
	if err == nil || resp.StatusCode != 200 || joined(chunks) != "chunk 0\n" {
		t.Errorf("failure mid-stream: %d %q, read error %v (want one)", resp.StatusCode, joined(chunks), err)
	}
	// Before it, an ordinary error answer.
	if r := fn.call(t, "POST", "/", []byte(`{"action":"stream","count":0,"sse":false}`)); r.status != 200 || len(r.body) != 0 {
		t.Errorf("an empty stream: %d %q", r.status, r.body)
	}
	if r := fn.call(t, "GET", HealthPath, nil); r.status != 200 {
		t.Errorf("health after the streams: %d", r.status)
	}
}

// TestGoHTTPForm runs a Go function in the net/http form: it writes its own answer, streams
// server-sent events with flushes, upgrades to a WebSocket, and its panic is a 500.
func TestGoHTTPForm(t *testing.T) {
	art := buildHandler(t, "testdata/handlers/gohttp", "go1.25", "")
	fn := startFunction(t, art, "SLESS_TIMEOUT_SECONDS=7")

	if r := fn.call(t, "PUT", "/some/path", nil); r.status != http.StatusTeapot || string(r.body) != "PUT /some/path" {
		t.Errorf("plain answer: %d %q", r.status, r.body)
	}
	if r := fn.call(t, "GET", "/deadline", nil); string(r.body) != "true 7s" {
		t.Errorf("the timeout is the request context's deadline: %q", r.body)
	}
	if r := fn.call(t, "GET", "/panic", nil); r.status != 500 || !strings.Contains(string(r.body), "kaboom") {
		t.Errorf("panic: %d %q", r.status, r.body)
	}
	resp, chunks, err := readStream(t, fn.url+"/events", "")
	if err != nil || resp.Header.Get("Content-Type") != "text/event-stream" || joined(chunks) != "data: tick 0\n\ndata: tick 1\n\ndata: tick 2\n\n" {
		t.Fatalf("events: %v %q", err, joined(chunks))
	}
	if chunks[len(chunks)-1].at-chunks[0].at < 400*time.Millisecond {
		t.Errorf("events arrived at %v: not flushed as written", chunks)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(fn.url, "http")+"/ws", nil)
	if err != nil {
		t.Fatalf("websocket dial: %v", err)
	}
	defer c.CloseNow()
	for _, msg := range []string{"one", "two"} {
		if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, got, err := c.Read(ctx)
		if err != nil || !bytes.Equal(got, []byte("echo: "+msg)) {
			t.Fatalf("echo of %q: %q %v", msg, got, err)
		}
	}
	if err := c.Close(websocket.StatusNormalClosure, "done"); err != nil && !errors.Is(err, io.EOF) {
		t.Errorf("close: %v", err)
	}
}
