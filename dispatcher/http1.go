package dispatcher

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"
)

// http1Client posts to one plain-HTTP address over its own keep-alive connections. It is the
// dispatcher's hot path: net/http's client hands every request to two per-connection
// goroutines and sorts the headers, which costs more CPU than the exchange itself for a
// trivial function; here the invoking goroutine writes the request in one write and reads
// the answer in place.
type http1Client struct {
	addr        string // host:port to dial
	host        string // Host header
	target      string // request-target, e.g. "/" or "/fn/ns/name"
	dialer      net.Dialer
	idleTimeout time.Duration

	mu      sync.Mutex
	idle    []*http1Conn // most recently used last
	maxIdle int
}

type http1Conn struct {
	net.Conn
	br       *bufio.Reader
	buf      []byte // the request being written, reused
	lastUsed time.Time
}

// errStaleConn: a kept-alive connection the server had closed; the request never reached a
// handler, so it is sent again on a new connection.
var errStaleConn = errors.New("kept-alive connection closed by the server")

// post sends body with header and returns the status, up to errorBodyLen bytes of a non-2xx
// body, and an error for a failed exchange.
func (c *http1Client) post(ctx context.Context, body []byte, header http.Header) (int, []byte, error) {
	if err := validHeader(header); err != nil {
		return 0, nil, err
	}
	for {
		conn, reused, err := c.get(ctx)
		if err != nil {
			return 0, nil, err
		}
		status, snippet, err := c.exchange(ctx, conn, reused, body, header)
		if errors.Is(err, errStaleConn) {
			continue
		}
		return status, snippet, err
	}
}

func (c *http1Client) get(ctx context.Context) (conn *http1Conn, reused bool, err error) {
	now := time.Now()
	c.mu.Lock()
	for len(c.idle) > 0 {
		conn = c.idle[len(c.idle)-1]
		c.idle = c.idle[:len(c.idle)-1]
		if now.Sub(conn.lastUsed) < c.idleTimeout {
			c.mu.Unlock()
			return conn, true, nil
		}
		conn.Close()
	}
	c.mu.Unlock()
	nc, err := c.dialer.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, false, err
	}
	return &http1Conn{Conn: nc, br: bufio.NewReaderSize(nc, 4096)}, false, nil
}

func (c *http1Client) put(conn *http1Conn) {
	conn.lastUsed = time.Now()
	c.mu.Lock()
	if len(c.idle) < c.maxIdle {
		c.idle = append(c.idle, conn)
		conn = nil
	}
	c.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
}

// exchange runs one request on conn and returns it to the pool when it can carry another.
func (c *http1Client) exchange(ctx context.Context, conn *http1Conn, reused bool, body []byte, header http.Header) (status int, snippet []byte, err error) {
	// Cancellation unblocks the read or write through a deadline in the past; a connection
	// that may have got that deadline is not reused.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	keep := false
	defer func() {
		if stopped := stop(); keep && stopped {
			c.put(conn)
		} else {
			conn.Close()
		}
	}()

	conn.buf = c.appendRequest(conn.buf[:0], body, header)
	if _, err := conn.Write(conn.buf); err != nil {
		return 0, nil, c.failure(ctx, reused, err)
	}
	if _, err := conn.br.Peek(1); err != nil { // nothing of an answer yet: maybe a stale connection
		return 0, nil, c.failure(ctx, reused, err)
	}
	resp, err := http.ReadResponse(conn.br, nil)
	for err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 { // e.g. 103 Early Hints
		resp, err = http.ReadResponse(conn.br, nil)
	}
	if err != nil {
		return 0, nil, c.failure(ctx, false, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		snippet, _ = io.ReadAll(io.LimitReader(resp.Body, errorBodyLen))
	}
	// The rest is read so the connection can carry the next request; a long answer is cut off
	// with the connection.
	n, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, c.failure(ctx, false, err)
	}
	keep = n < 1<<20 && !resp.Close && ctx.Err() == nil
	return resp.StatusCode, snippet, nil
}

func (c *http1Client) failure(ctx context.Context, reused bool, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if reused && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
		return errStaleConn
	}
	return err
}

// framingHeaders are written by appendRequest itself.
var framingHeaders = map[string]struct{}{"Host": {}, "Content-Length": {}, "Transfer-Encoding": {}, "Connection": {}, "User-Agent": {}}

// validHeader reports whether every header name is a token and no value can break the
// request's framing (callers build headers from cleaned values; this guards the contract).
func validHeader(header http.Header) error {
	for k, vs := range header {
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("invalid header name %q", k)
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Errorf("invalid value of header %s", k)
			}
		}
	}
	return nil
}

func (c *http1Client) appendRequest(b, body []byte, header http.Header) []byte {
	b = append(b, "POST "...)
	b = append(b, c.target...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, c.host...)
	b = append(b, "\r\nUser-Agent: sless-dispatcher\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n"...)
	for k, vs := range header {
		if _, framing := framingHeaders[k]; framing {
			continue
		}
		for _, v := range vs {
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	b = append(b, "\r\n"...)
	return append(b, body...)
}
