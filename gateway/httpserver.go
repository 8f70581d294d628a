package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
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
	// MaxConnsPerClient caps the open connections of one client address under MaxConns, so
	// one client cannot take them all; a request on a connection beyond it gets 429 and the
	// connection is closed. Behind a proxy that pools connections every caller is the proxy:
	// raise it to MaxConns there. Default MaxConns/4.
	MaxConnsPerClient int64
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
	if l.MaxConnsPerClient <= 0 {
		l.MaxConnsPerClient = max(1, l.MaxConns/4)
	}
	if l.BodyTimeout <= 0 {
		l.BodyTimeout = 2 * time.Minute
	}
	if l.WriteStall <= 0 {
		l.WriteStall = 60 * time.Second
	}
	return l
}

// HTTPServer returns the http.Server to serve s with: header and idle limits from
// Config.Conns (bodies and writes are bounded per request by ServeHTTP). Serve it on
// s.Listener(ln): the connection caps and the idle bound of upgraded connections live there.
// There is no WriteTimeout: /fn/ responses stream and functions may run for 15 minutes.
// It speaks HTTP/1.1 and HTTP/2 without TLS (h2c, prior knowledge), or with TLSConfig set
// and ServeTLS, HTTP/1.1 and HTTP/2 by ALPN, so one connection carries many calls and
// streams; the header, body, idle and write bounds hold on each.
func (s *Server) HTTPServer() *http.Server {
	l := s.cfg.Conns
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	protocols.SetHTTP2(true) // only over TLS
	return &http.Server{
		Handler: s, ReadHeaderTimeout: l.ReadHeaderTimeout, IdleTimeout: l.IdleTimeout, MaxHeaderBytes: l.MaxHeaderBytes,
		Protocols: &protocols, ConnContext: connContext, ConnState: connState,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

// Listener wraps ln so that each connection counts against the caps from its accept until
// it is closed, one taken over by an upgrade (WebSocket) included, and an upgraded
// connection with no byte either way for IdleTimeout is closed.
func (s *Server) Listener(ln net.Listener) net.Listener {
	return countedListener{Listener: ln, c: &s.conns}
}

// connCounter counts open connections, in total and per client address.
type connCounter struct {
	max, perClient int64
	idle           time.Duration
	mu             sync.Mutex
	open           int64
	byClient       map[netip.Addr]int64
}

// Why a connection's requests are refused: accepted beyond a cap.
const (
	overNone = iota
	overTotal
	overClient
)

type countedListener struct {
	net.Listener
	c *connCounter
}

func (l countedListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.c.track(conn), nil
}

func (c *connCounter) track(conn net.Conn) *countedConn {
	var client netip.Addr
	if ap, err := netip.ParseAddrPort(conn.RemoteAddr().String()); err == nil {
		client = ap.Addr().Unmap()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open++
	c.byClient[client]++
	cc := &countedConn{Conn: conn, c: c, client: client}
	switch {
	case c.open > c.max:
		cc.over = overTotal
	case c.byClient[client] > c.perClient:
		cc.over = overClient
	}
	return cc
}

func (c *connCounter) release(client netip.Addr) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open--
	if c.byClient[client]--; c.byClient[client] <= 0 {
		delete(c.byClient, client)
	}
}

// countedConn is one counted connection; once upgraded, every read and write moves its
// deadline to its idle bound from then (net/http clears deadlines when it hands it over):
// IdleTimeout, or past the function's own bound (newUpgradeBody).
type countedConn struct {
	net.Conn
	c        *connCounter
	client   netip.Addr
	over     int
	upgraded atomic.Bool
	idle     atomic.Int64 // a time.Duration; 0: IdleTimeout
	closed   sync.Once
}

func (cc *countedConn) Read(p []byte) (int, error) {
	cc.extend()
	return cc.Conn.Read(p)
}

func (cc *countedConn) Write(p []byte) (int, error) {
	cc.extend()
	return cc.Conn.Write(p)
}

func (cc *countedConn) extend() {
	if cc.upgraded.Load() {
		idle := cc.c.idle
		if d := cc.idle.Load(); d > 0 {
			idle = time.Duration(d)
		}
		_ = cc.Conn.SetDeadline(time.Now().Add(idle))
	}
}

func (cc *countedConn) Close() error {
	cc.closed.Do(func() { cc.c.release(cc.client) })
	return cc.Conn.Close()
}

type (
	overCapKey struct{}
	// connKey holds a request's countedConn.
	connKey struct{}
)

// counted is the countedConn under conn, whether or not TLS is on it.
func counted(conn net.Conn) (*countedConn, bool) {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	cc, ok := conn.(*countedConn)
	return cc, ok
}

func connContext(ctx context.Context, conn net.Conn) context.Context {
	cc, ok := counted(conn)
	if !ok {
		return ctx
	}
	if cc.over != overNone {
		ctx = context.WithValue(ctx, overCapKey{}, cc.over)
	}
	return context.WithValue(ctx, connKey{}, cc)
}

// connState starts the idle bound of a connection an upgrade took over. Whoever closes a
// connection, net/http or the proxy that took it over, closes the countedConn.
func connState(conn net.Conn, state http.ConnState) {
	if cc, ok := counted(conn); ok && state == http.StateHijacked {
		cc.upgraded.Store(true)
	}
}

// refuseOverCap answers a request on a connection accepted beyond a cap and reports whether
// it did: 503 beyond the total, 429 beyond the client's share, the connection closed.
func refuseOverCap(w http.ResponseWriter, r *http.Request) bool {
	over, _ := r.Context().Value(overCapKey{}).(int)
	if over == overNone {
		return false
	}
	w.Header().Set("Connection", "close")
	w.Header().Set("Retry-After", "1")
	if over == overClient {
		writeError(w, http.StatusTooManyRequests, "this client has too many open connections to the gateway; close some (reuse keep-alive connections) and retry")
	} else {
		writeError(w, http.StatusServiceUnavailable, "the gateway has too many open connections; retry later")
	}
	return true
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
