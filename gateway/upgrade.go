package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gobwas/ws"
)

// upgradeBody is the function's side of an upgraded connection (a WebSocket), which
// ReverseProxy copies to the caller's and back. It holds the connection to the gateway's
// bounds like a stream: no byte either way for the function's stream_idle_timeout_sec, or
// past the invocation's deadline. A WebSocket ended at a bound gets a close frame first
// (1001, saying why) when the function's side stands between two frames, as a silent
// socket does, and has not closed it itself; any other upgrade is closed.
type upgradeBody struct {
	io.ReadWriteCloser
	*bounds
	ws *frames // nil: not a WebSocket
	// tail is what remains of the close frame once the connection ended at a bound.
	tail []byte
	done bool
	// sent is closed once Read returned its last byte, by then written to the caller:
	// ReverseProxy closes the caller's connection when either direction fails.
	sent     chan struct{}
	sentOnce sync.Once
}

// upgradeSlack is how long after a bound the caller's connection itself times out (its
// idle bound, countedConn): the gateway's close frame goes first.
const upgradeSlack = 2 * time.Second

// newUpgradeBody wraps the body of resp, a 101 Switching Protocols, and moves the idle
// bound of the caller's connection past the function's.
func newUpgradeBody(resp *http.Response, idle, timeout time.Duration, cancel context.CancelCauseFunc) {
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok || idle <= 0 {
		return
	}
	ctx := resp.Request.Context()
	if cc, ok := ctx.Value(connKey{}).(*countedConn); ok {
		cc.idle.Store(int64(idle + upgradeSlack))
	}
	b := &upgradeBody{ReadWriteCloser: rwc, bounds: newBounds(ctx, idle, timeout, cancel), sent: make(chan struct{})}
	if strings.EqualFold(resp.Header.Get("Upgrade"), "websocket") {
		b.ws = &frames{}
	}
	resp.Body = b
}

func (b *upgradeBody) Read(p []byte) (int, error) {
	if b.done {
		n := copy(p, b.tail)
		if b.tail = b.tail[n:]; len(b.tail) == 0 {
			b.finish()
			return n, io.EOF
		}
		return n, nil
	}
	n, err := b.ReadWriteCloser.Read(p)
	if n > 0 {
		b.touch()
		if b.ws != nil {
			b.ws.feed(p[:n])
		}
	}
	if err == nil {
		return n, nil
	}
	why := b.reason()
	if why == "" {
		b.finish()
		return n, err
	}
	b.done = true
	if b.ws != nil && b.ws.between() && !b.ws.closed {
		b.tail, _ = ws.CompileFrame(ws.NewCloseFrame(ws.NewCloseFrameBody(ws.StatusGoingAway, why)))
	}
	if n > 0 || len(b.tail) > 0 {
		return n, nil
	}
	b.finish()
	return 0, io.EOF
}

// Write passes the caller's bytes on. One that fails because the connection ended at a bound
// waits (a little) for the close frame to reach the caller before ReverseProxy closes it.
func (b *upgradeBody) Write(p []byte) (int, error) {
	n, err := b.ReadWriteCloser.Write(p)
	if n > 0 {
		b.touch()
	}
	if err != nil && b.reason() != "" {
		select {
		case <-b.sent:
		case <-time.After(upgradeSlack):
		}
	}
	return n, err
}

func (b *upgradeBody) finish() { b.sentOnce.Do(func() { close(b.sent) }) }

func (b *upgradeBody) Close() error {
	b.stop()
	return b.ReadWriteCloser.Close()
}

// frames follows the frame boundaries (RFC 6455 §5.2) of the bytes a function sends on a
// WebSocket, so that the gateway's close frame goes between two of them.
type frames struct {
	head [ws.MaxHeaderSize]byte
	n    int // header bytes held
	// r and scratch let ws read a held header without allocating.
	r       bytes.Reader
	scratch [ws.MaxHeaderSize - 2]byte
	left    int64 // payload bytes of the current frame still to come
	// closed: a close frame went by; lost: bytes that are no frame header, nothing is known.
	closed, lost bool
}

// feed takes the next bytes the function sent.
func (f *frames) feed(p []byte) {
	for len(p) > 0 && !f.lost {
		if f.left > 0 {
			k := min(int64(len(p)), f.left)
			f.left -= k
			p = p[k:]
			continue
		}
		want := ws.MinHeaderSize
		if f.n >= ws.MinHeaderSize {
			want = headerSize(f.head[1])
		}
		k := copy(f.head[f.n:want], p)
		f.n += k
		p = p[k:]
		if f.n < ws.MinHeaderSize || f.n < headerSize(f.head[1]) {
			continue
		}
		f.r.Reset(f.head[:f.n])
		h, err := ws.ReadHeaderBuffer(&f.r, f.scratch[:])
		if err != nil {
			f.lost = true
			return
		}
		f.n, f.left = 0, h.Length
		f.closed = f.closed || h.OpCode == ws.OpClose
	}
}

// between reports whether the bytes so far end a frame.
func (f *frames) between() bool { return !f.lost && f.n == 0 && f.left == 0 }

// headerSize is the size of a frame header from its second byte: the mask bit and the
// payload length, whose values 126 and 127 announce a 16- and a 64-bit length.
func headerSize(second byte) int {
	n := ws.MinHeaderSize
	switch second & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if second&0x80 != 0 {
		n += 4
	}
	return n
}
