package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sync/atomic"
	"time"
)

// errStreamIdle is the cause of a request context ended because its streamed answer sent
// nothing for the function's stream idle bound.
var errStreamIdle = errors.New("stream idle")

// streamBody is the body of an answer of unknown length (chunked: a stream, SSE) on its way
// to the caller. It ends the answer at the gateway's bounds: silent for the function's
// stream_idle_timeout_sec, or past the invocation's deadline. Either one cancels the request
// to the function, and the read that fails then ends the body with io.EOF: ReverseProxy
// aborts the caller's connection on any other error, and a bound is an answer, not a reset.
// An event stream gets a final comment saying why first.
type streamBody struct {
	io.ReadCloser
	*bounds
	sse bool
	// lastByte is the last byte sent: a comment starts on a line of its own.
	lastByte byte
	// tail is what remains of the final comment once the body ended at a bound.
	tail []byte
	done bool
}

// newStreamBody wraps resp's body when it has no length; cancel ends the request to the
// function.
func newStreamBody(resp *http.Response, idle, timeout time.Duration, cancel context.CancelCauseFunc) {
	if resp.ContentLength >= 0 || idle <= 0 {
		return
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	resp.Body = &streamBody{ReadCloser: resp.Body, bounds: newBounds(resp.Request.Context(), idle, timeout, cancel),
		sse: mt == "text/event-stream", lastByte: '\n'}
}

// bounds are the gateway's bounds of one streamed answer or upgraded connection: silent for
// idle, or past the invocation's deadline. Either one cancels the request to the function.
type bounds struct {
	ctx     context.Context // the request to the function's
	timeout time.Duration   // the function's, to say why
	idle    time.Duration
	timer   *time.Timer
	last    atomic.Int64 // UnixNano of the last byte either way
}

func newBounds(ctx context.Context, idle, timeout time.Duration, cancel context.CancelCauseFunc) *bounds {
	b := &bounds{ctx: ctx, idle: idle, timeout: timeout}
	b.touch()
	// The timer is not reset on every byte: when it fires it looks at the last one and
	// waits out the rest of the bound, so a busy stream costs one clock read per chunk.
	b.timer = time.AfterFunc(idle, func() {
		if rest := idle - time.Since(time.Unix(0, b.last.Load())); rest > 0 {
			b.timer.Reset(rest)
			return
		}
		cancel(errStreamIdle)
	})
	return b
}

func (b *bounds) stop() { b.timer.Stop() }

func (b *bounds) touch() { b.last.Store(time.Now().UnixNano()) }

// reason says why the request to the function ended ("": not at one of its bounds).
func (b *bounds) reason() string {
	switch context.Cause(b.ctx) {
	case errStreamIdle:
		return fmt.Sprintf("stream idle for %s; ended by the gateway", b.idle)
	case errFunctionTimeout:
		return fmt.Sprintf("function timed out after %s", b.timeout)
	}
	return ""
}

func (b *streamBody) Read(p []byte) (int, error) {
	if b.done {
		n := copy(p, b.tail)
		if b.tail = b.tail[n:]; len(b.tail) == 0 {
			return n, io.EOF
		}
		return n, nil
	}
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.touch()
		b.lastByte = p[n-1]
	}
	if err == nil || err == io.EOF {
		return n, err
	}
	why := b.reason()
	if why == "" {
		return n, err
	}
	b.done = true
	if b.sse {
		if b.lastByte != '\n' {
			b.tail = append(b.tail, '\n')
		}
		b.tail = append(b.tail, ": "+why+"\n\n"...)
	}
	if n > 0 || len(b.tail) > 0 {
		return n, nil
	}
	return 0, io.EOF
}

func (b *streamBody) Close() error {
	b.stop()
	return b.ReadCloser.Close()
}
