package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
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
// and bodies, idle keep-alive time, header size, stalled response writes, the number of open
// connections and of requests in flight. Zero values take the defaults.
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
	// MaxRequestsPerClient caps the requests one client address has in flight across all its
	// connections and their HTTP/2 streams (a stream or an upgraded connection counts for its
	// whole life); a request beyond it gets 429. Behind a proxy that pools connections raise
	// it with MaxConnsPerClient. Default a quarter of ProxyConfig.MaxHeldPerFunction, at most
	// MaxConnsPerClient, so one client cannot hold every slot of a function.
	MaxRequestsPerClient int64
	// BodyTimeout bounds reading a request body: every one from its arrival (a request
	// answered without reading its body included), /v1 uploads and asynchronous calls'
	// bodies to the end. Once a /fn/ call's function is known its body is bounded by the
	// function's timeout instead (the longest timeout when it has none). Default 2m.
	BodyTimeout time.Duration
	// BodyIdleTimeout bounds the wait for the next byte of a request body: a read that gets
	// none for this long fails (408, and a /fn/ call is cancelled), whatever is left of the
	// body's whole bound. Default 30s.
	BodyIdleTimeout time.Duration
	// WriteStall fails a response write that makes no progress this long (a client that
	// stopped reading). Default 60s.
	WriteStall time.Duration
}

// withDefaults fills the zero values; heldPerFunction is the proxy's cap of one function's
// requests in flight, which a client's share of requests stays a quarter of.
func (l ConnLimits) withDefaults(heldPerFunction int64) ConnLimits {
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
	if l.MaxRequestsPerClient <= 0 {
		l.MaxRequestsPerClient = max(1, min(l.MaxConnsPerClient, heldPerFunction/4))
	}
	if l.BodyTimeout <= 0 {
		l.BodyTimeout = 2 * time.Minute
	}
	if l.BodyIdleTimeout <= 0 {
		l.BodyIdleTimeout = 30 * time.Second
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

// connCounter counts open connections, in total and per client address, and each client's
// requests in flight.
type connCounter struct {
	max, perClient int64
	// requestsPerClient caps a client's requests in flight (clientShare.requests).
	requestsPerClient int64
	idle              time.Duration
	mu                sync.Mutex
	open              int64
	byClient          map[netip.Addr]*clientShare
}

// clientShare is what one client address holds while it has a connection open: its
// connections (under connCounter.mu) and its requests in flight on all of them, counted
// without a lock on the request path.
type clientShare struct {
	conns    int64
	requests atomic.Int64
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
	share := c.byClient[client]
	if share == nil {
		share = &clientShare{}
		c.byClient[client] = share
	}
	share.conns++
	cc := &countedConn{Conn: conn, c: c, client: client, share: share}
	switch {
	case c.open > c.max:
		cc.over = overTotal
	case share.conns > c.perClient:
		cc.over = overClient
	}
	return cc
}

func (c *connCounter) release(cc *countedConn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open--
	// A request still ending on a connection that closed keeps its share to release into.
	if cc.share.conns--; cc.share.conns <= 0 {
		delete(c.byClient, cc.client)
	}
}

// countedConn is one counted connection; once upgraded, every read and write moves its
// deadline to its idle bound from then (net/http clears deadlines when it hands it over):
// IdleTimeout, or past the function's own bound (newUpgradeBody).
type countedConn struct {
	net.Conn
	c        *connCounter
	client   netip.Addr
	share    *clientShare
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
	cc.closed.Do(func() { cc.c.release(cc) })
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

// admitRequest counts r against its client's share of requests in flight, HTTP/1.1
// requests and HTTP/2 streams alike, and returns the share to release when r ends (nil: r
// is not on a counted connection, a server not on Listener); beyond the share it answers
// 429 and returns ok false.
func (c *connCounter) admitRequest(w http.ResponseWriter, r *http.Request) (share *clientShare, ok bool) {
	cc, _ := r.Context().Value(connKey{}).(*countedConn)
	if cc == nil {
		return nil, true
	}
	if cc.share.requests.Add(1) > c.requestsPerClient {
		cc.share.requests.Add(-1)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, fmt.Sprintf("this client has %d requests in flight at the gateway, its whole share; wait for some to finish and retry", c.requestsPerClient))
		return nil, false
	}
	return cc.share, true
}

// release ends a request admitted by admitRequest (nil: one not counted).
func (s *clientShare) release() {
	if s != nil {
		s.requests.Add(-1)
	}
}

// limitBody bounds reading r's body: to d from now in all, and each read to idle without a
// byte. A read past either fails and the handler answers (or the proxy gives up). Once the
// body has been read to its end the deadline is lifted, so a long response does not trip the
// server's background read. The whole bound is the connection's read deadline (the stream's
// over HTTP/2), so it also bounds what net/http reads of a body the handler left unread
// before it sends the answer (up to 256 KiB, to keep the connection).
func limitBody(w http.ResponseWriter, r *http.Request, d, idle time.Duration) *deadlineBody {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	rc := http.NewResponseController(w)
	end := time.Now().Add(d)
	if rc.SetReadDeadline(end) != nil {
		return nil // not a network connection (tests with a recorder)
	}
	b := &deadlineBody{ReadCloser: r.Body, rc: rc, idle: idle}
	b.end.Store(end.UnixNano())
	r.Body = b
	return b
}

// rebound moves the whole bound of r's body, set by limitBody when the request arrived, to d
// from now (a body without one gets one): the proxy's once it knows the function's timeout.
// The idle bound stays.
func rebound(w http.ResponseWriter, r *http.Request, d, idle time.Duration) *deadlineBody {
	b, ok := r.Body.(*deadlineBody)
	if !ok {
		return limitBody(w, r, d, idle)
	}
	// A body read to its end has no deadline left, and one past it stays failed.
	if b.done.Load() || b.expired() {
		return b
	}
	end := time.Now().Add(d)
	if b.setReadDeadline(end) {
		b.end.Store(end.UnixNano())
	}
	return b
}

// deadlineBody is a request body under limitBody's bounds. The idle bound counts only while
// a read waits for a byte, on a timer of the body's own: the body is not read while a call
// waits for a cold start or for the function to take more, and what the client sent
// meanwhile is there to read. (A deadline on the connection would count that too, and over
// HTTP/2 a stream's deadline ends its body when it passes, read or not.)
type deadlineBody struct {
	io.ReadCloser
	// rc is the request's until its handler returns (finished): a body may still be read
	// then, by a transport that goes on sending it, and an HTTP/2 stream's writer is reused.
	rc       *http.ResponseController
	mu       sync.Mutex
	finished bool
	idle     time.Duration
	// timer fires idle after a read began; only the reading goroutine touches it.
	// readSince is when the read in progress began (Unix nanoseconds): a firing that a
	// scheduler delayed past the next read's start finds that read younger than idle.
	timer     *time.Timer
	readSince atomic.Int64
	// end is the whole body's deadline (Unix nanoseconds).
	end     atomic.Int64
	reading atomic.Bool
	done    atomic.Bool
	// timedOut: a read failed at a deadline; idledOut: a read waited idle for a byte.
	timedOut, idledOut atomic.Bool
	// cut: the body ended in an error of the client's side before its end (not a deadline).
	cut atomic.Bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	if b.done.Load() {
		return b.ReadCloser.Read(p)
	}
	if b.idledOut.Load() {
		return 0, fmt.Errorf("no byte of the request body for %s: %w", b.idle, os.ErrDeadlineExceeded)
	}
	b.readSince.Store(time.Now().UnixNano())
	b.reading.Store(true)
	if b.timer == nil {
		b.timer = time.AfterFunc(b.idle, b.idleOut)
	} else {
		b.timer.Reset(b.idle)
	}
	n, err := b.ReadCloser.Read(p)
	b.timer.Stop()
	b.reading.Store(false)
	switch {
	case err == nil:
	case err == io.EOF:
		b.done.Store(true)
		b.setReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.timedOut.Store(true)
	default:
		b.cut.Store(true)
	}
	return n, err
}

// idleOut ends a read that waited idle for a byte: a deadline now fails it.
func (b *deadlineBody) idleOut() {
	if b.reading.Load() && time.Since(time.Unix(0, b.readSince.Load())) >= b.idle {
		b.idledOut.Store(true)
		b.setReadDeadline(time.Now())
	}
}

// setReadDeadline moves the request's read deadline while its handler runs and reports
// whether it did.
func (b *deadlineBody) setReadDeadline(t time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.finished && b.rc.SetReadDeadline(t) == nil
}

// finish ends the body's hold on its request's connection: its handler returns (nil: none).
func (b *deadlineBody) finish() {
	if b != nil {
		b.mu.Lock()
		b.finished = true
		b.mu.Unlock()
	}
}

// expired reports whether a read of the body failed at a deadline, or one waits past it
// (false for nil): the server cancels the request when the read fails, and whoever sees that
// may run before the failed Read returns here.
func (b *deadlineBody) expired() bool {
	return b != nil && (b.timedOut.Load() || b.idledOut.Load() || (b.reading.Load() && !b.done.Load() && time.Now().UnixNano() >= b.end.Load()))
}

// broken reports whether the body ended in an error before its end that was no deadline's:
// the client cut it off (false for nil).
func (b *deadlineBody) broken() bool { return b != nil && b.cut.Load() }
