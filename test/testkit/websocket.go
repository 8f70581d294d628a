package testkit

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// WantIdleClose reads c, a WebSocket silent from now on, and fails t unless the gateway ends
// it at the function's stream idle bound of idleSec seconds with its close frame: 1001 and
// the reason that names the bound.
func WantIdleClose(ctx context.Context, t testing.TB, c *websocket.Conn, idleSec int) {
	t.Helper()
	start := time.Now()
	_, _, err := c.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusGoingAway || ce.Reason != fmt.Sprintf("stream idle for %ds; ended by the gateway", idleSec) {
		t.Fatalf("an idle socket ended with %v, want the gateway's close frame 1001", err)
	}
	// The bound runs from when the gateway passed the last byte on; the caller read it, and
	// began this read, up to a loaded machine's scheduling later (170 ms seen).
	const reading = 500 * time.Millisecond
	idle := time.Duration(idleSec) * time.Second
	if took := time.Since(start); took < idle-reading || took > idle+3*time.Second {
		t.Errorf("the idle socket was closed after %s, want its %s bound", took, idle)
	}
}
