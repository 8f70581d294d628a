package testkit

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// WantIdleClose reads c, a WebSocket silent since the caller began writing its last message
// at wrote, and fails t unless the gateway ends it at the function's stream idle bound of
// idleSec seconds with its close frame: 1001 and the reason that names the bound.
func WantIdleClose(ctx context.Context, t testing.TB, c *websocket.Conn, idleSec int, wrote time.Time) {
	t.Helper()
	start := time.Now()
	_, _, err := c.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusGoingAway || ce.Reason != fmt.Sprintf("stream idle for %ds; ended by the gateway", idleSec) {
		t.Fatalf("an idle socket ended with %v, want the gateway's close frame 1001", err)
	}
	// The bound runs from the last byte the gateway passed on either way: no earlier than
	// the caller's write began, no later than its read of the answer ended. Between the two
	// lies the function's answer and a loaded machine's scheduling (0.7 s seen), so the
	// lower limit counts from the write and the upper one from this read.
	idle := time.Duration(idleSec) * time.Second
	if sinceWrite, took := time.Since(wrote), time.Since(start); sinceWrite < idle || took > idle+3*time.Second {
		t.Errorf("the idle socket was closed %s after the last write and %s into this read, want its %s bound", sinceWrite, took, idle)
	}
}
