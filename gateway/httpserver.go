package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

// ConnLimits bound what one client can hold of a gateway server: the time to send headers
// and bodies, idle keep-alive time, header size, stalled response writes and the number of
// open connections. Zero values take the defaults.
type ConnLimits struct {
	// ReadHeaderTimeout bounds sending a request's headers. Default 10s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes keep-alive connections that send no request. Default 60s.
	IdleTimeout time.Duration
	// MaxHeaderBytes caps a request's headers. Default 64 KiB.
	MaxHeaderBytes int
	// MaxConns caps open connections; a request on a connection beyond it gets 503 and the
	// connection is closed. Default 10,000.
	MaxConns int64
	// BodyTimeout bounds reading a request body: every one from its arrival (a request
	// answered without reading its body included), /v1 uploads and asynchronous calls'
	// bodies to the end. Once a /fn/ call's function is known its body is bounded by the
	// function's timeout instead (the longest timeout when it has none). Default 2m.
	BodyTimeout time.Duration
	// WriteStall fails a response write that makes no progress this long (a client that
	// stopped reading). Default 60s.
	WriteStall time.Duration
}

func (l ConnLimits) withDefaults() ConnLimits {
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = 10 * time.Second
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = 60 * time.Second
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = 64 << 10
	}
	if l.MaxConns <= 0 {
		l.MaxConns = 10000
	}
	if l.BodyTimeout <= 0 {
		l.BodyTimeout = 2 * time.Minute
	}
	if l.WriteStall <= 0 {
		l.WriteStall = 60 * time.Second
	}
	return l
}

// HTTPServer returns the http.Server to serve s with: header, idle and connection limits
// from Config.Conns (bodies and writes are bounded per request by ServeHTTP). There is no
// WriteTimeout: /fn/ responses stream and functions may run for 15 minutes.
func (s *Server) HTTPServer() *http.Server {
	l := s.cfg.Conns
	return &http.Server{
		Handler: s, ReadHeaderTimeout: l.ReadHeaderTimeout, IdleTimeout: l.IdleTimeout, MaxHeaderBytes: l.MaxHeaderBytes,
		ConnContext: s.conns.connContext, ConnState: s.conns.connState,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

// connCounter counts open connections and marks those accepted beyond the cap.
type connCounter struct {
	max  int64
	open atomic.Int64
}

type overCapKey struct{}

func (c *connCounter) connContext(ctx context.Context, _ net.Conn) context.Context {
	if c.open.Add(1) > c.max {
		return context.WithValue(ctx, overCapKey{}, true)
	}
	return ctx
}

func (c *connCounter) connState(_ net.Conn, state http.ConnState) {
	if state == http.StateClosed || state == http.StateHijacked {
		c.open.Add(-1)
	}
}

// overCap reports whether r arrived on a connection accepted beyond the cap.
func overCap(r *http.Request) bool {
	over, _ := r.Context().Value(overCapKey{}).(bool)
	return over
}

// limitBody bounds the time to read r's body to d: reads after the deadline fail and the
// handler answers (or the proxy gives up). Once the body has been read to its end the
// deadline is lifted, so a long response does not trip the server's background read. The
// deadline is on the connection, so it also bounds what net/http reads of a body the handler
// left unread before it sends the answer (up to 256 KiB, to keep the connection).
func limitBody(w http.ResponseWriter, r *http.Request, d time.Duration) *deadlineBody {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	rc := http.NewResponseController(w)
	deadline := time.Now().Add(d)
	if rc.SetReadDeadline(deadline) != nil {
		return nil // not a network connection (tests with a recorder)
	}
	b := &deadlineBody{ReadCloser: r.Body, rc: rc}
	b.deadline.Store(deadline.UnixNano())
	r.Body = b
	return b
}

// rebound moves the deadline of r's body, set by limitBody when the request arrived, to d
// from now (a body without one gets one): the proxy's once it knows the function's timeout.
func rebound(w http.ResponseWriter, r *http.Request, d time.Duration) *deadlineBody {
	b, ok := r.Body.(*deadlineBody)
	if !ok {
		return limitBody(w, r, d)
	}
	// A body read to its end has no deadline left, and one past it stays failed.
	if b.done.Load() || b.expired() {
		return b
	}
	deadline := time.Now().Add(d)
	if b.rc.SetReadDeadline(deadline) == nil {
		b.deadline.Store(deadline.UnixNano())
	}
	return b
}

type deadlineBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	deadline atomic.Int64 // Unix nanoseconds
	done     atomic.Bool
	timedOut atomic.Bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF && !b.done.Load():
		b.done.Store(true)
		_ = b.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.timedOut.Store(true)
	}
	return n, err
}

// expired reports whether the body was not read to its end by its deadline (false for nil).
// The deadline is compared too: the server cancels the request when the read fails, and
// whoever sees that may run before the failed Read returns here.
func (b *deadlineBody) expired() bool {
	return b != nil && (b.timedOut.Load() || (!b.done.Load() && time.Now().UnixNano() >= b.deadline.Load()))
}
