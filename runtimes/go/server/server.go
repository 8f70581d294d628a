// Command server is the sless HTTP wrapper for Go functions. It is built together with the
// user's package (module path sless/fn/handler, mapped by go.work) and a generated bind.go
// that assigns handle; see runtimes/README.md for the contract.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"
)

// handle is assigned by the generated bind.go; request carries the HTTP metadata, built
// only when the user's function takes it (wantsRequest). httpHandler is assigned instead for
// a function in the net/http form, which answers the request itself.
var (
	handle       func(event, request map[string]interface{}) interface{}
	wantsRequest bool
	httpHandler  func(http.ResponseWriter, *http.Request)
)

const healthPath = "/healthz"

// Connection bounds: headers, idle keep-alive (longer than the idle timeouts of the gateway's
// pool and the KEDA interceptor in front, so they close first), header size, and the body of
// a function without a timeout: the longest timeout a function may set
// (rules.MaxTimeoutSeconds; runtimes/contract_test.go holds them equal).
const (
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 120 * time.Second
	maxHeaderBytes    = 64 << 10
	maxBodySeconds    = 900
	// listenBacklog is capped by the kernel at net.core.somaxconn, as net.Listen's.
	listenBacklog = 4096
)

type config struct {
	// listenFD, when set (>= 0), is a bound Unix socket to listen on (sless dev); else addr.
	listenFD    int
	addr        string
	timeout     time.Duration // 0 = none
	maxBody     int64
	shutdown    time.Duration
	mode        string
	terminalLog string
}

func main() {
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	cfg, err := loadConfig()
	if err != nil {
		logger.Error("invalid wrapper configuration", "error", err)
		os.Exit(2)
	}
	if handle == nil && httpHandler == nil {
		logger.Error("no handler linked into this binary; build it with sless (bind.go assigns handle)")
		os.Exit(2)
	}
	if cfg.mode == "job" && httpHandler != nil {
		logger.Error("a net/http handler cannot run as a job: a job's function takes an event and returns a value")
		os.Exit(2)
	}
	if cfg.mode == "job" {
		os.Exit(runJob(cfg, logger, os.Stdin, os.Stdout))
	}
	if err := serve(cfg, logger); err != nil {
		logger.Error("server failed", "error", err)
		os.Exit(1)
	}
}

func loadConfig() (config, error) {
	cfg := config{
		listenFD:    -1,
		addr:        net.JoinHostPort(envOr("SLESS_HOST", "127.0.0.1"), envOr("PORT", "8080")),
		maxBody:     6 << 20,
		shutdown:    25 * time.Second,
		mode:        os.Getenv("SLESS_MODE"),
		terminalLog: os.Getenv("SLESS_TERMINATION_LOG"),
	}
	secs, err := envInt("SLESS_TIMEOUT_SECONDS", 0)
	if err != nil {
		return cfg, err
	}
	cfg.timeout = time.Duration(secs) * time.Second
	if v := os.Getenv("SLESS_LISTEN_FD"); v != "" {
		fd, err := strconv.Atoi(v)
		if err != nil || fd < 3 {
			return cfg, fmt.Errorf("SLESS_LISTEN_FD=%q: want a descriptor number of 3 or more", v)
		}
		cfg.listenFD = fd
	}
	if cfg.maxBody, err = envInt("SLESS_MAX_BODY_BYTES", cfg.maxBody); err != nil {
		return cfg, err
	}
	grace, err := envInt("SLESS_SHUTDOWN_SECONDS", int64(cfg.shutdown/time.Second))
	cfg.shutdown = time.Duration(grace) * time.Second
	return cfg, err
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func envInt(key string, def int64) (int64, error) {
	v := os.Getenv(key)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s=%q: want a non-negative integer", key, v)
	}
	return n, nil
}

func listen(cfg config) (net.Listener, error) {
	if cfg.listenFD >= 0 {
		// Listening here, not in sless dev, makes this process the one its dial checks for.
		if err := syscall.Listen(cfg.listenFD, listenBacklog); err != nil {
			return nil, fmt.Errorf("listen on descriptor %d: %w", cfg.listenFD, err)
		}
		f := os.NewFile(uintptr(cfg.listenFD), "sless-socket")
		defer f.Close()
		ln, err := net.FileListener(f)
		if err != nil {
			return nil, fmt.Errorf("listen on descriptor %d: %w", cfg.listenFD, err)
		}
		return ln, nil
	}
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.addr, err)
	}
	return ln, nil
}

func serve(cfg config, logger *slog.Logger) error {
	ln, err := listen(cfg)
	if err != nil {
		return err
	}
	w := &wrapper{cfg: cfg, logger: logger, waiting: map[net.Conn]struct{}{}}
	srv := &http.Server{Handler: w, ConnState: w.connState,
		ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	logger.Info("function listening", "addr", ln.Addr().String(), "timeout_seconds", int64(cfg.timeout/time.Second))
	select {
	case err := <-done:
		return err
	case sig := <-stop:
		logger.Info("shutting down", "signal", sig.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.shutdown)
	defer cancel()
	// New connections are refused at once (a caller's dial retry finds another pod); open
	// ones stay until requests stop coming, each answered with Connection: close.
	w.draining.Store(true)
	_ = ln.Close()
	<-done // Serve returned: Shutdown has no listener left to close
	w.waitQuiet(ctx)
	return srv.Shutdown(ctx)
}

// drainQuiet is how long the drain waits without a new request before it closes the idle
// keep-alive connections: a caller (the interceptor's pool, pinned to this pod through the
// Service) may be sending on one at that instant, and a POST whose connection closed under
// it is not retried.
const drainQuiet = time.Second

type wrapper struct {
	cfg    config
	logger *slog.Logger

	draining atomic.Bool // after SIGTERM every response ends its connection
	mu       sync.Mutex
	waiting  map[net.Conn]struct{} // connections waiting for a request
	last     time.Time             // when a request last began to arrive
}

func (w *wrapper) connState(c net.Conn, s http.ConnState) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch s {
	case http.StateNew, http.StateIdle:
		w.waiting[c] = struct{}{}
	case http.StateActive:
		delete(w.waiting, c)
		w.last = time.Now()
	default:
		delete(w.waiting, c)
	}
}

// waitQuiet returns once no request has begun for drainQuiet (at once when no connection
// waits for one), or when ctx ends.
func (w *wrapper) waitQuiet(ctx context.Context) {
	w.mu.Lock()
	w.last = time.Now()
	w.mu.Unlock()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		w.mu.Lock()
		quiet := len(w.waiting) == 0 || time.Since(w.last) >= drainQuiet
		w.mu.Unlock()
		if quiet {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (w *wrapper) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if w.draining.Load() {
		rw.Header().Set("Connection", "close")
	}
	if r.URL.Path == healthPath && r.Method == http.MethodGet {
		holdHealth(r)
		writeJSON(rw, http.StatusOK, map[string]string{"status": "ok"})
		return
	}
	start := time.Now()
	if ref := verifyIdentity(identityKey, identityKeyOK, r.Method, r.RequestURI, r.Header, start); ref != nil {
		w.logInvocation(r, writeError(rw, ref.status, ref.text), start)
		return
	}
	if httpHandler != nil {
		w.logInvocation(r, w.serveHTTPForm(rw, r), start)
		return
	}
	if status := w.invoke(rw, r, start); status != 0 {
		w.logInvocation(r, status, start)
	}
}

// serveHTTPForm runs a handler in the net/http form: the body capped at the body limit,
// the function's timeout as the request context's deadline (the handler decides what to do
// with it: it cannot be stopped from outside), a panic before the answer began a 500 and one
// after it a cut connection. Flush, Hijack (WebSockets) and trailers are the handler's.
func (w *wrapper) serveHTTPForm(rw http.ResponseWriter, r *http.Request) (status int) {
	r.Body = http.MaxBytesReader(rw, r.Body, w.cfg.maxBody)
	if w.cfg.timeout > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), w.cfg.timeout)
		defer cancel()
		r = r.WithContext(ctx)
	}
	sw := &statusWriter{ResponseWriter: rw}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			w.logger.Error("handler panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			if sw.status != 0 {
				panic(http.ErrAbortHandler) // the answer began: cut it rather than end it as complete
			}
			status = writeError(rw, http.StatusInternalServerError, fmt.Sprintf("panic: %v", p))
		}
	}()
	httpHandler(sw, r)
	if sw.status == 0 {
		sw.status = http.StatusOK
	}
	return sw.status
}

// statusWriter remembers the status a net/http handler sent. It is an http.Flusher and an
// http.Hijacker itself, for libraries that type-assert the writer (gorilla/websocket,
// golang.org/x/net/websocket), and Unwrap serves http.ResponseController (deadlines and the
// rest) and the libraries that use it (github.com/coder/websocket).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Flush() {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	_ = http.NewResponseController(s.ResponseWriter).Flush() // as http.Flusher: nothing to report
}

// Hijack hands the connection to the handler; it is then logged as switching protocols (an
// upgrade writes its 101 on the connection itself), and a later panic cuts it.
func (s *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(s.ResponseWriter).Hijack()
	if err == nil && s.status == 0 {
		s.status = http.StatusSwitchingProtocols
	}
	return conn, rw, err
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// maxHealthHold caps ?hold_ms on the health path.
const maxHealthHold = 2 * time.Second

// holdHealth waits ?hold_ms (at most maxHealthHold, less when the caller goes away) before a
// health answer: a scheduled pre-warm keeps one such request in flight at all times, so a
// function scaled on concurrency — a point-in-time count — is seen busy until its tick.
func holdHealth(r *http.Request) {
	ms, err := strconv.Atoi(r.URL.Query().Get("hold_ms"))
	if err != nil || ms <= 0 {
		return
	}
	t := time.NewTimer(min(time.Duration(ms)*time.Millisecond, maxHealthHold))
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
}

func (w *wrapper) logInvocation(r *http.Request, status int, start time.Time) {
	w.logger.Info("invocation", "method", r.Method, "path", r.URL.Path, "status", status,
		"duration_ms", time.Since(start).Milliseconds(), "traceparent", r.Header.Get("Traceparent"))
}

// invoke runs the handler on the request's goroutine and answers; it returns the status, or
// 0 when the timeout answered (and logged) first.
func (w *wrapper) invoke(rw http.ResponseWriter, r *http.Request, start time.Time) int {
	bodyTime := w.cfg.timeout
	if bodyTime == 0 {
		bodyTime = maxBodySeconds * time.Second
	}
	_ = http.NewResponseController(rw).SetReadDeadline(start.Add(bodyTime))
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, w.cfg.maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			return writeError(rw, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes", w.cfg.maxBody))
		case errors.Is(err, os.ErrDeadlineExceeded):
			return writeError(rw, http.StatusRequestTimeout, "the request body did not arrive within "+bodyTime.String())
		}
		return writeError(rw, http.StatusBadRequest, "reading request body: "+err.Error())
	}
	_ = http.NewResponseController(rw).SetReadDeadline(time.Time{})
	var request map[string]interface{}
	if wantsRequest {
		request = requestInfo(r, body)
	}
	if w.cfg.timeout == 0 {
		res := protect(decodeEvent(body), request)
		if src := streamOf(res.value); src != nil {
			return w.stream(rw, r, src, time.Time{})
		}
		return writeResult(rw, res, 0)
	}
	// The timer answers 504 itself while the handler runs on, abandoned: no goroutine
	// hand-off per call. The mutex makes exactly one side write, and keeps ServeHTTP from
	// returning while the timer still writes.
	var mu sync.Mutex
	answered := false
	timer := time.AfterFunc(w.cfg.timeout, func() {
		mu.Lock()
		defer mu.Unlock()
		if answered {
			return
		}
		answered = true
		rw.Header().Set("Connection", "close") // the connection stays busy until the handler returns
		writeResult(rw, result{timedOut: true}, w.cfg.timeout)
		if f, ok := rw.(http.Flusher); ok {
			f.Flush()
		}
		w.logInvocation(r, http.StatusGatewayTimeout, start)
	})
	res := protect(decodeEvent(body), request)
	mu.Lock()
	if answered {
		mu.Unlock()
		return 0
	}
	answered = true
	timer.Stop()
	mu.Unlock()
	if src := streamOf(res.value); src != nil {
		return w.stream(rw, r, src, start.Add(w.cfg.timeout))
	}
	return writeResult(rw, res, w.cfg.timeout)
}

// decodeEvent turns a body into the event map: a JSON object as is, anything else under "body".
func decodeEvent(body []byte) map[string]interface{} {
	if len(bytes.TrimSpace(body)) == 0 {
		return map[string]interface{}{}
	}
	var event map[string]interface{}
	if err := json.Unmarshal(body, &event); err == nil && event != nil {
		return event
	}
	var value interface{}
	if err := json.Unmarshal(body, &value); err == nil {
		return map[string]interface{}{"body": value}
	}
	return map[string]interface{}{"body": string(body)}
}

// requestInfo is the handler's second argument: metadata and the raw body (base64 when it
// is not UTF-8).
func requestInfo(r *http.Request, body []byte) map[string]interface{} {
	headers := make(map[string]interface{}, len(r.Header))
	multi := make(map[string]interface{}, len(r.Header))
	for k, v := range r.Header {
		headers[strings.ToLower(k)] = strings.Join(v, ", ")
		values := make([]interface{}, len(v))
		for i, one := range v {
			values[i] = one
		}
		multi[strings.ToLower(k)] = values
	}
	query, multiQuery := make(map[string]interface{}), make(map[string]interface{})
	for k, v := range r.URL.Query() {
		values := make([]interface{}, len(v))
		for i, one := range v {
			values[i] = one
		}
		query[k], multiQuery[k] = v[0], values
	}
	raw, binary := string(body), !utf8.Valid(body)
	if binary {
		raw = base64.StdEncoding.EncodeToString(body)
	}
	return map[string]interface{}{
		"method": r.Method, "path": r.URL.Path, "query": query, "multiValueQuery": multiQuery, "headers": headers,
		"multiValueHeaders": multi, "body": raw, "isBase64Encoded": binary,
		"traceparent": r.Header.Get("Traceparent"),
	}
}

type result struct {
	value    interface{}
	err      error
	timedOut bool
}

// call runs the handler for a job; after the timeout the caller gets timedOut and the
// handler's goroutine is abandoned (Go cannot stop it), its result discarded.
func call(event, request map[string]interface{}, timeout time.Duration) result {
	drained := func() result {
		res := protect(event, request)
		if src := streamOf(res.value); src != nil {
			return drain(src)
		}
		return res
	}
	if timeout == 0 {
		return drained()
	}
	ch := make(chan result, 1)
	go func() { ch <- drained() }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case res := <-ch:
		return res
	case <-t.C:
		return result{timedOut: true}
	}
}

func protect(event, request map[string]interface{}) (res result) {
	defer func() {
		if p := recover(); p != nil {
			res = result{err: fmt.Errorf("panic: %v\n%s", p, debug.Stack())}
		}
	}()
	v := handle(event, request)
	if err, ok := v.(error); ok {
		return result{err: err}
	}
	return result{value: v}
}

func writeResult(rw http.ResponseWriter, res result, timeout time.Duration) int {
	switch {
	case res.timedOut:
		return writeError(rw, http.StatusGatewayTimeout, fmt.Sprintf("function timed out after %s", timeout))
	case res.err != nil:
		return writeError(rw, http.StatusInternalServerError, res.err.Error())
	}
	if s, ok := res.value.(string); ok {
		write(rw, http.StatusOK, "text/plain; charset=utf-8", []byte(s))
		return http.StatusOK
	}
	out, err := json.Marshal(res.value)
	if err != nil {
		return writeError(rw, http.StatusInternalServerError, "result is not JSON-encodable: "+err.Error())
	}
	if bytes.HasPrefix(out, []byte("{")) && bytes.Contains(out, []byte(`"statusCode"`)) {
		if resp, isResponse, err := responseOf(out); err != nil {
			return writeError(rw, http.StatusInternalServerError, "invalid response object: "+err.Error())
		} else if isResponse {
			return resp.write(rw)
		}
	}
	write(rw, http.StatusOK, "application/json", out)
	return http.StatusOK
}

// responseKeys are the keys of a response object: a result that is an object with an
// integer statusCode (runtimes/README.md), as a map or a struct with these JSON names (such
// as aws-lambda-go's events.APIGatewayProxyResponse).
var responseKeys = map[string]bool{"statusCode": true, "headers": true, "multiValueHeaders": true, "body": true, "isBase64Encoded": true}

// droppedHeader reports headers the wrapper or the platform sets; a handler's are dropped.
func droppedHeader(name string) bool {
	switch strings.ToLower(name) {
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "trailer", "content-length":
		return true
	}
	return strings.HasPrefix(strings.ToLower(name), "x-sless-")
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// responseOf reads a JSON result as a response object; isResponse is false for an object
// without an integer statusCode (a plain result).
func responseOf(out []byte) (resp response, isResponse bool, err error) {
	var fields map[string]json.RawMessage
	if json.Unmarshal(out, &fields) != nil {
		return resp, false, nil
	}
	var code int64
	if raw := fields["statusCode"]; len(raw) == 0 || raw[0] == '"' || json.Unmarshal(raw, &code) != nil {
		return resp, false, nil // absent, a string or not an integer: a plain result
	}
	for k := range fields {
		if !responseKeys[k] {
			return resp, true, fmt.Errorf("unknown key %q; a response object has body, headers, isBase64Encoded, multiValueHeaders, statusCode", k)
		}
	}
	if code < 100 || code > 599 {
		return resp, true, fmt.Errorf("statusCode %d is not in 100-599", code)
	}
	resp = response{status: int(code), header: http.Header{}}
	for _, field := range []string{"headers", "multiValueHeaders"} {
		if err := addHeaders(resp.header, field, fields[field]); err != nil {
			return resp, true, err
		}
	}
	ctype := "text/plain; charset=utf-8"
	var b64 bool
	if raw, ok := fields["isBase64Encoded"]; ok && json.Unmarshal(raw, &b64) != nil {
		return resp, true, errors.New("isBase64Encoded: want true or false")
	}
	var text string
	switch raw := fields["body"]; {
	case b64:
		if json.Unmarshal(raw, &text) != nil {
			return resp, true, errors.New("isBase64Encoded needs the body as a base64 string")
		}
		if resp.body, err = base64.StdEncoding.DecodeString(text); err != nil {
			return resp, true, fmt.Errorf("body is not valid base64: %w", err)
		}
		ctype = "application/octet-stream"
	case len(raw) == 0 || string(raw) == "null":
	case json.Unmarshal(raw, &text) == nil:
		resp.body = []byte(text)
	default:
		resp.body, ctype = raw, "application/json"
	}
	if resp.header.Get("Content-Type") == "" {
		resp.header.Set("Content-Type", ctype)
	}
	return resp, true, nil
}

// addHeaders adds a headers or multiValueHeaders object: each name maps to a value or a
// list of values (strings, numbers or booleans).
func addHeaders(h http.Header, field string, raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var given map[string]json.RawMessage
	if json.Unmarshal(raw, &given) != nil {
		return fmt.Errorf("%s: want an object of header names", field)
	}
	for name, v := range given {
		if !validHeaderName(name) {
			return fmt.Errorf("%s: %q is not a valid header name", field, name)
		}
		var values []interface{}
		if json.Unmarshal(v, &values) != nil {
			values = []interface{}{nil}
			_ = json.Unmarshal(v, &values[0])
		}
		for _, one := range values {
			var text string
			switch one := one.(type) {
			case string:
				text = one
			case float64, bool:
				text = fmt.Sprint(one)
			default:
				return fmt.Errorf("header %s: want a string", name)
			}
			if strings.ContainsAny(text, "\r\n\x00") {
				return fmt.Errorf("header %s: a value may not contain CR, LF or NUL", name)
			}
			if !droppedHeader(name) {
				h.Add(name, text)
			}
		}
	}
	return nil
}

// validHeaderName reports whether name is an RFC 9110 token.
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range []byte(name) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func (r response) write(rw http.ResponseWriter) int {
	h := rw.Header()
	for k, v := range r.header {
		h[k] = v
	}
	noBody := r.status < 200 || r.status == http.StatusNoContent || r.status == http.StatusNotModified
	if !noBody {
		h.Set("Content-Length", strconv.Itoa(len(r.body)))
	}
	rw.WriteHeader(r.status)
	if !noBody {
		_, _ = rw.Write(r.body)
	}
	return r.status
}

// write sends a complete response; Content-Length lets a flushed response finish before
// the handler returns.
func write(rw http.ResponseWriter, status int, ctype string, body []byte) {
	h := rw.Header()
	h.Set("Content-Type", ctype)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	rw.WriteHeader(status)
	_, _ = rw.Write(body)
}

func writeError(rw http.ResponseWriter, status int, msg string) int {
	writeJSON(rw, status, map[string]string{"error": msg})
	return status
}

func writeJSON(rw http.ResponseWriter, status int, v interface{}) {
	out, _ := json.Marshal(v)
	write(rw, status, "application/json", out)
}

// runJob handles SLESS_MODE=job: one event from SLESS_EVENT (or stdin), result to stdout
// and the termination-message file, exit code 0 on success and 1 on failure.
func runJob(cfg config, logger *slog.Logger, stdin io.Reader, stdout io.Writer) int {
	raw, ok := os.LookupEnv("SLESS_EVENT")
	body := []byte(raw)
	if !ok {
		var err error
		if body, err = io.ReadAll(io.LimitReader(stdin, cfg.maxBody+1)); err != nil {
			logger.Error("reading the job event from stdin", "error", err)
			return 1
		}
	}
	var out []byte
	code := 0
	var res result
	if int64(len(body)) > cfg.maxBody {
		res.err = fmt.Errorf("job event exceeds %d bytes", cfg.maxBody)
	} else {
		res = call(decodeEvent(body), map[string]interface{}{"mode": "job", "traceparent": os.Getenv("TRACEPARENT")}, cfg.timeout)
	}
	switch {
	case res.timedOut:
		out, code = errorJSON(fmt.Sprintf("function timed out after %s", cfg.timeout)), 1
	case res.err != nil:
		out, code = errorJSON(res.err.Error()), 1
	default:
		if s, isString := res.value.(string); isString {
			out = []byte(s)
		} else if b, err := json.Marshal(res.value); err == nil {
			out = b
		} else {
			out, code = errorJSON("result is not JSON-encodable: "+err.Error()), 1
		}
	}
	_, _ = stdout.Write(append(out, '\n'))
	writeTerminationLog(cfg.terminalLog, out, logger)
	logger.Info("job finished", "exit_code", code, "traceparent", os.Getenv("TRACEPARENT"))
	return code
}

func errorJSON(msg string) []byte {
	out, _ := json.Marshal(map[string]string{"error": msg})
	return out
}

// writeTerminationLog writes the Kubernetes termination message (capped at its 4096-byte
// limit). Without SLESS_TERMINATION_LOG the default path is used only when it is writable.
func writeTerminationLog(path string, msg []byte, logger *slog.Logger) {
	flags := os.O_WRONLY | os.O_TRUNC | os.O_CREATE
	if path == "" {
		// Kubernetes creates the default file; never create it outside a pod.
		path, flags = "/dev/termination-log", os.O_WRONLY|os.O_TRUNC
	}
	if len(msg) > 4096 {
		msg = msg[:4096]
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		if flags&os.O_CREATE != 0 {
			logger.Error("opening the termination-message file", "path", path, "error", err)
		}
		return
	}
	defer f.Close()
	if _, err := f.Write(msg); err != nil {
		logger.Error("writing the termination message", "path", path, "error", err)
	}
}

// streamOf returns the items of a streamed result (runtimes/README.md, "Streamed
// responses"), or nil for a whole value: a channel's values, or an io.Reader's bytes as they
// are read. The producer stops when done closes (the caller left, the timeout ended it).
func streamOf(v interface{}) func(done <-chan struct{}) <-chan interface{} {
	if r, ok := v.(io.Reader); ok {
		return func(done <-chan struct{}) <-chan interface{} {
			items := make(chan interface{})
			go func() {
				defer close(items)
				if c, ok := r.(io.Closer); ok {
					defer c.Close()
				}
				buf := make([]byte, 32<<10)
				for {
					n, err := r.Read(buf)
					if n > 0 {
						select {
						case items <- append([]byte(nil), buf[:n]...):
						case <-done:
							return
						}
					}
					if err == io.EOF {
						return
					}
					if err != nil {
						select {
						case items <- err:
						case <-done:
						}
						return
					}
				}
			}()
			return items
		}
	}
	ch := reflect.ValueOf(v)
	if v == nil || ch.Kind() != reflect.Chan || ch.Type().ChanDir()&reflect.RecvDir == 0 {
		return nil
	}
	return func(done <-chan struct{}) <-chan interface{} {
		items := make(chan interface{})
		go func() {
			defer close(items)
			cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: ch}, {Dir: reflect.SelectRecv, Chan: reflect.ValueOf(done)}}
			for {
				i, item, ok := reflect.Select(cases)
				if i == 1 || !ok {
					return
				}
				select {
				case items <- item.Interface():
				case <-done:
					return
				}
			}
		}()
		return items
	}
}

// stream sends a stream's items as they come, each written and flushed at once (chunked).
// The first item is awaited before the header: a failure (an error item) before it is an
// ordinary 500, and it may be a response object (status, headers). After the header an error
// item cuts the answer short, so the caller never takes it as complete; at the deadline the
// stream ends cleanly (text/event-stream: a last comment says why).
func (w *wrapper) stream(rw http.ResponseWriter, r *http.Request, src func(<-chan struct{}) <-chan interface{}, deadline time.Time) int {
	done := make(chan struct{})
	defer close(done)
	items := src(done)
	var expired <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		expired = t.C
	}
	var first interface{}
	var more bool
	select {
	case first, more = <-items:
	case <-expired:
		rw.Header().Set("Connection", "close")
		return writeError(rw, http.StatusGatewayTimeout, fmt.Sprintf("function timed out after %s", w.cfg.timeout))
	case <-r.Context().Done():
		return statusClientClosed
	}
	if err, isErr := first.(error); isErr {
		return writeError(rw, http.StatusInternalServerError, err.Error())
	}
	status, skip := http.StatusOK, !more // skip: no first item to send
	rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if _, isText := first.(string); more && !isText && !isBytes(first) {
		if out, err := json.Marshal(first); err == nil && bytes.HasPrefix(out, []byte("{")) {
			resp, isResponse, err := responseOf(out)
			if err != nil {
				return writeError(rw, http.StatusInternalServerError, "invalid response object: "+err.Error())
			}
			if isResponse {
				status, first, skip = resp.status, resp.body, len(resp.body) == 0
				for k, v := range resp.header {
					rw.Header()[k] = v
				}
			}
		}
	}
	ctype, _, _ := strings.Cut(rw.Header().Get("Content-Type"), ";")
	sse := strings.EqualFold(strings.TrimSpace(ctype), "text/event-stream")
	rc := http.NewResponseController(rw)
	rw.WriteHeader(status)
	_ = rc.Flush()
	for item := first; more; skip = false {
		if !skip && !w.sendItem(rw, rc, r, item, sse) {
			return status // the caller left
		}
		select {
		case item, more = <-items:
		case <-expired:
			if sse {
				_, _ = fmt.Fprintf(rw, ": function timed out after %s\n\n", w.cfg.timeout)
			}
			return status
		case <-r.Context().Done():
			return status
		}
	}
	return status
}

// sendItem writes and flushes one item of a stream; false when the caller left. An error
// item, or one that cannot be encoded, cuts the answer: the caller sees an incomplete one.
func (w *wrapper) sendItem(rw http.ResponseWriter, rc *http.ResponseController, r *http.Request, item interface{}, sse bool) bool {
	if err, isErr := item.(error); isErr {
		w.logger.Error("stream failed", "path", r.URL.Path, "error", err)
		panic(http.ErrAbortHandler)
	}
	chunk, err := streamChunk(item, sse)
	if err != nil {
		w.logger.Error("stream item", "path", r.URL.Path, "error", err)
		panic(http.ErrAbortHandler)
	}
	if len(chunk) == 0 || r.Method == http.MethodHead {
		return true
	}
	if _, err := rw.Write(chunk); err != nil {
		return false
	}
	_ = rc.Flush()
	return true
}

// statusClientClosed is logged for a caller that left before the answer began.
const statusClientClosed = 499

func isBytes(v interface{}) bool {
	_, ok := v.([]byte)
	return ok
}

// streamChunk is what one streamed item is sent as: bytes as given; in a text/event-stream a
// string is one event's data and a map of event/id/retry/data one whole event; otherwise a
// string as given and any other value as a line of JSON.
func streamChunk(item interface{}, sse bool) ([]byte, error) {
	switch v := item.(type) {
	case []byte:
		return v, nil
	case string:
		if !sse {
			return []byte(v), nil
		}
	}
	if !sse {
		out, err := json.Marshal(item)
		return append(out, '\n'), err
	}
	fields, ok := sseFields(item)
	if !ok {
		fields = map[string]interface{}{"data": item}
	}
	var b strings.Builder
	for _, name := range []string{"event", "id", "retry"} {
		if v, ok := fields[name]; ok && v != nil {
			fmt.Fprintf(&b, "%s: %v\n", name, v)
		}
	}
	data, isText := fields["data"].(string)
	if !isText {
		out, err := json.Marshal(fields["data"])
		if err != nil {
			return nil, err
		}
		data = string(out)
	}
	for _, line := range strings.Split(data, "\n") {
		b.WriteString("data: " + line + "\n")
	}
	b.WriteString("\n")
	return []byte(b.String()), nil
}

// sseFields reads an item that is a map with only the keys of an event.
func sseFields(item interface{}) (map[string]interface{}, bool) {
	var fields map[string]interface{}
	switch v := item.(type) {
	case map[string]interface{}:
		fields = v
	case map[string]string:
		fields = make(map[string]interface{}, len(v))
		for k, s := range v {
			fields[k] = s
		}
	default:
		return nil, false
	}
	if len(fields) == 0 {
		return nil, false
	}
	for k := range fields {
		switch k {
		case "event", "id", "retry", "data":
		default:
			return nil, false
		}
	}
	return fields, true
}

// drain joins a stream's items into one text: job mode takes the whole.
func drain(src func(<-chan struct{}) <-chan interface{}) result {
	done := make(chan struct{})
	defer close(done)
	var b bytes.Buffer
	for item := range src(done) {
		if err, isErr := item.(error); isErr {
			return result{err: err}
		}
		chunk, err := streamChunk(item, false)
		if err != nil {
			return result{err: err}
		}
		b.Write(chunk)
	}
	return result{value: b.String()}
}
