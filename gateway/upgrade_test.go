package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"sless.dev/sless/gateway"
)

// TestWebSocketBounds: a WebSocket through the gateway is held to the function's bounds as
// a stream is — silent either way for its stream idle bound, or past the invocation's
// deadline — and the caller is told with a close frame (1001, saying why), not a reset. The
// function's idle bound, not the gateway's shorter --idle-timeout, is the socket's. A
// function that closes the socket itself is passed through, and one whose connection stops
// in the middle of a frame is closed without a frame that would corrupt it.
func TestWebSocketBounds(t *testing.T) {
	const ns = "sless-team"
	gone := make(chan string, 8) // the function's side, once the gateway closed it
	fn := http.NewServeMux()
	fn.HandleFunc("/silent", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		_, _, err = c.Read(context.Background())
		gone <- fmt.Sprint("silent: ", err)
	})
	fn.HandleFunc("/ticking", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for c.Write(context.Background(), websocket.MessageText, []byte("tick")) == nil {
			time.Sleep(50 * time.Millisecond)
		}
		gone <- "ticking"
	})
	fn.HandleFunc("/goodbye", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		_ = c.Close(4000, "the function's own goodbye")
	})
	fn.HandleFunc("/midframe", func(w http.ResponseWriter, r *http.Request) {
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		rw.Write([]byte{0x81, 10, 'h', 'a', 'l', 'f'}) // a text frame of 10 bytes, 4 sent
		rw.Flush()
		_, _ = io.Copy(io.Discard, rw)
	})
	const idle = time.Second
	addr := boundsGateway(t, fn, gateway.Config{Conns: gateway.ConnLimits{IdleTimeout: 300 * time.Millisecond}})
	base := "ws://" + addr + "/fn/" + ns

	for _, tc := range []struct {
		name, url string
		code      websocket.StatusCode
		reason    string
		min, max  time.Duration
		gone      string
	}{
		{"silent past the idle bound", base + "/idle/silent", websocket.StatusGoingAway, "stream idle for 1s; ended by the gateway",
			idle, idle + 2*time.Second, "silent: "},
		{"busy past the deadline", base + "/bounded/ticking", websocket.StatusGoingAway, "function timed out after 1s",
			1200 * time.Millisecond, 4 * time.Second, "ticking"},
		{"closed by the function", base + "/idle/goodbye", 4000, "the function's own goodbye", 0, idle, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			c, _, err := websocket.Dial(ctx, tc.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.CloseNow()
			for {
				if _, _, err = c.Read(ctx); err != nil {
					break
				}
			}
			took := time.Since(start)
			var ce websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != tc.code || ce.Reason != tc.reason {
				t.Fatalf("the socket ended with %v; want a close frame %d %q", err, tc.code, tc.reason)
			}
			if took < tc.min || took > tc.max {
				t.Errorf("closed after %s, want %s–%s", took, tc.min, tc.max)
			}
			if tc.gone == "" {
				return
			}
			select {
			case g := <-gone:
				if !strings.HasPrefix(g, tc.gone) {
					t.Errorf("the function's side: %q", g)
				}
			case <-time.After(5 * time.Second):
				t.Error("the function's side of the socket was not closed")
			}
		})
	}

	t.Run("cut in the middle of a frame", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "GET /fn/%s/idle/midframe HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", ns)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %v %v", resp, err)
		}
		start := time.Now()
		rest, err := io.ReadAll(br)
		if err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
			t.Fatalf("reading to the end: %v", err)
		}
		if string(rest) != "\x81\x0ahalf" {
			t.Errorf("the caller read %q: want the half frame and nothing after it", rest)
		}
		if took := time.Since(start); took < idle-100*time.Millisecond || took > idle+2*time.Second {
			t.Errorf("closed after %s, want the 1 s idle bound", took)
		}
	})
}
