// Package testkit holds the helpers the test suites of several packages each wrote for
// themselves: polling until a condition holds, zip archives of sources to upload, tokens
// signed the way the gateway verifies them, and whether a process is alive.
package testkit

import (
	"archive/zip"
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// WaitFor polls cond every 20 ms until it holds, failing t after timeout with what it
// waited for.
func WaitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Zip is a zip archive of files (name → content), written in name order so the same files
// give the same bytes.
func Zip(t testing.TB, files map[string]string) []byte {
	t.Helper()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, n := range names {
		w, err := zw.Create(n)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(w, files[n]); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Token is an HS256 token for sub signed with key, valid for two hours (longer than any suite runs).
func Token(t testing.TB, key []byte, sub string) string {
	t.Helper()
	claims := jwt.RegisteredClaims{Subject: sub, ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Alive says whether a process with this pid exists.
func Alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// Trickle POSTs to path on addr (Host: host, or addr when empty) with the header lines
// given and a 1,000-byte body sent a byte every interval, and reports the status line and
// when the server closed the connection, waiting up to wait for the answer. A failure is
// reported with t.Errorf and an empty status, so it may run off the test's goroutine.
func Trickle(t testing.TB, addr, host, path string, every, wait time.Duration, header ...string) (string, time.Duration) {
	if host == "" {
		host = addr
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Error(err)
		return "", 0
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n", path, host)
	for _, h := range header {
		fmt.Fprintf(conn, "%s\r\n", h)
	}
	fmt.Fprint(conn, "\r\n")
	go func() {
		for range 1000 {
			if _, err := conn.Write([]byte(" ")); err != nil {
				return
			}
			time.Sleep(every)
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Errorf("POST %s (%s) %v: no answer to a trickling body after %s: %v", path, host, header, time.Since(start).Round(time.Millisecond), err)
		return "", time.Since(start)
	}
	// The server closes the connection; with the client's bytes still unread that is a reset.
	if _, err := io.Copy(io.Discard, r); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("POST %s (%s) %v: connection still open after %s: %v", path, host, header, time.Since(start).Round(time.Millisecond), err)
		return "", time.Since(start)
	}
	return strings.TrimSpace(line), time.Since(start)
}

// Responsive GETs url n times, every interval, and fails t unless each answers 200 within
// a second (a server busy with slow clients must still serve others).
func Responsive(t testing.TB, url string, n int, every time.Duration) {
	t.Helper()
	for range n {
		time.Sleep(every)
		start := time.Now()
		resp, err := http.Get(url)
		if err != nil {
			t.Errorf("GET %s while slow clients are served: %v", url, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || time.Since(start) > time.Second {
			t.Errorf("GET %s while slow clients are served: %d after %s", url, resp.StatusCode, time.Since(start))
		}
	}
}

// SteerablePython is a Python function whose event steers it: {"crash": true} exits the
// process mid-request, {"sleep": s} holds the request; it answers with its pid and "hello":
// the event's name (or "world").
const SteerablePython = `import os, time

def handle(event, request=None):
    if event.get("crash"):
        os._exit(3)
    if event.get("sleep"):
        time.sleep(event["sleep"])
    return {"pid": os.getpid(), "hello": event.get("name", "world")}
`

// AsyncPython is a Python function for queued calls: {"fail": true} raises an error naming
// the event's name, {"sleep": s} holds the call; it answers "hello": the event's name (or
// "world").
const AsyncPython = `import time

def handle(event, request=None):
    if event.get("fail"):
        raise RuntimeError("asked to fail: " + str(event.get("name", "")))
    if event.get("sleep"):
        time.sleep(event["sleep"])
    return {"hello": event.get("name", "world")}
`

// Serve serves hs on a new loopback port until the test ends and returns its address.
func Serve(t testing.TB, hs *http.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	return ln.Addr().String()
}

// NeedsHeavy skips t under -short (`make test-unit`, which runs only what needs nothing but
// Go and the interpreters on the machine) because it needs what: a real service, a control
// plane, a tool test/tools/ builds, or a wait on the wall clock (a cron minute tick). Each
// shared helper that starts or dials such a part calls it, so a test states its need once,
// by using the helper. Without -short it does nothing: `make test` runs everything and a
// missing part fails the test there.
func NeedsHeavy(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s: run make test", what)
	}
}

// AMQPURL is the broker t uses: $SLESS_TEST_AMQP_URL, or the machine's RabbitMQ. Under -short
// it skips t.
func AMQPURL(t testing.TB) string {
	t.Helper()
	NeedsHeavy(t, "RabbitMQ")
	return BrokerURL()
}

// BrokerURL is AMQPURL without a test, for a test binary's child process.
func BrokerURL() string {
	return cmp.Or(os.Getenv("SLESS_TEST_AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/")
}

// PostJSON POSTs body to url as application/json, with header's fields added, and returns
// the answer (closed) and its body.
func PostJSON(t testing.TB, url, body string, header http.Header) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer to POST %s: %v", url, err)
	}
	return resp, b
}

// Burst makes n calls at once while reading gauge every 5 ms, and returns the largest value
// read and the calls that did not answer 200, as "<status> <body>".
func Burst(n int, call func() (int, string), gauge func() int) (peak int, failed []string) {
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				peak = max(peak, gauge()) // only this goroutine writes peak until sampled closes
			}
		}
	}()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, body := call(); code != http.StatusOK {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("%d %s", code, body))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	return peak, failed
}

// Buffer is a bytes.Buffer that a process or goroutine may write while the test reads it.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// FreePort is a loopback port nothing listened on a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pick a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// FreeAddr is 127.0.0.1:FreePort.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}

// FirstByte GETs url n times one after another on hc (one keep-alive connection) and
// returns the median time from sending each to the first byte of its body.
func FirstByte(hc *http.Client, url string, n int) (time.Duration, error) {
	ds := make([]time.Duration, 0, n)
	one := make([]byte, 1)
	for range n {
		start := time.Now()
		resp, err := hc.Get(url)
		if err != nil {
			return 0, err
		}
		_, err = io.ReadFull(resp.Body, one)
		ds = append(ds, time.Since(start))
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, fmt.Errorf("GET %s: %d, first byte: %w", url, resp.StatusCode, err)
		}
	}
	slices.Sort(ds)
	return ds[n/2], nil
}

// AcceptEach serves ln until the test ends: each connection goes to handle, one at a time,
// and is closed after it.
func AcceptEach(t *testing.T, ln net.Listener, handle func(net.Conn)) {
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			handle(c)
			c.Close()
		}
	}()
}

// Authorization is the header map of a request with Authorization authz, or none for "".
func Authorization(authz string) map[string]string {
	if authz == "" {
		return nil
	}
	return map[string]string{"Authorization": authz}
}

// Get sends a GET of url with Host host ("" the URL's own) and header, and returns the
// answer with its body read and closed.
func Get(t *testing.T, url, host string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}
