package testkit

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Link forwards a loopback port to target. Cut closes every connection and refuses new ones,
// which is what a network partition looks like to a client; Restore listens on the same port
// again.
type Link struct {
	target string
	mu     sync.Mutex
	addr   string
	ln     net.Listener
	conns  []net.Conn
}

// NewLink starts a link to target on a free loopback port; it is cut when the test ends.
func NewLink(t testing.TB, target string) *Link {
	l := &Link{target: target}
	l.Restore(t)
	t.Cleanup(l.Cut)
	return l
}

// Addr is the link's host:port.
func (l *Link) Addr() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.addr
}

// Restore listens again (on the port it had before, if any).
func (l *Link) Restore(t testing.TB) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	addr := l.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("link to %s: listen on %s: %v", l.target, addr, err)
	}
	l.ln, l.addr = ln, ln.Addr().String()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go l.pipe(c)
		}
	}()
}

func (l *Link) pipe(c net.Conn) {
	u, err := net.Dial("tcp", l.target)
	if err != nil {
		c.Close()
		return
	}
	l.mu.Lock()
	l.conns = append(l.conns, c, u)
	l.mu.Unlock()
	go func() { _, _ = io.Copy(u, c); u.Close() }()
	_, _ = io.Copy(c, u)
	c.Close()
}

// Cut closes the listener and every connection through the link.
func (l *Link) Cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln != nil {
		l.ln.Close()
		l.ln = nil
	}
	for _, c := range l.conns {
		c.Close()
	}
	l.conns = nil
}
