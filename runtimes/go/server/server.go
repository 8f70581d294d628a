// Command server is the sless HTTP wrapper for Go functions. It is built together with the
// user's package (module path sless/fn/handler, mapped by go.work) and a generated bind.go
// that assigns handle; see runtimes/README.md for the contract.
package main

import (
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
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

// handle is assigned by the generated bind.go; request carries the HTTP metadata, built
// only when the user's function takes it (wantsRequest).
var (
	handle       func(event, request map[string]interface{}) interface{}
	wantsRequest bool
)

const healthPath = "/healthz"

// Connection bounds: headers, idle keep-alive (longer than the idle timeouts of the gateway's
// pool and the KEDA interceptor in front, so they close first), header size, and the body of
// a function without a timeout.
const (
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 120 * time.Second
	maxHeaderBytes    = 64 << 10
	maxBodyTime       = 15 * time.Minute
)

type config struct {
	// socket, when set, is the Unix socket to listen on (sless dev); else addr.
	socket      string
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
	if handle == nil {
		logger.Error("no handler linked into this binary; build it with sless (bind.go assigns handle)")
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
		socket:      os.Getenv("SLESS_SOCKET"),
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
	if cfg.socket != "" {
		_ = os.Remove(cfg.socket) // left by a process that was killed
		ln, err := net.Listen("unix", cfg.socket)
		if err != nil {
			return nil, fmt.Errorf("listen on %s: %w", cfg.socket, err)
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
	srv := &http.Server{Handler: &wrapper{cfg: cfg, logger: logger},
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
	return srv.Shutdown(ctx)
}

type wrapper struct {
	cfg    config
	logger *slog.Logger
}

func (w *wrapper) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.URL.Path == healthPath && r.Method == http.MethodGet {
		holdHealth(r)
		writeJSON(rw, http.StatusOK, map[string]string{"status": "ok"})
		return
	}
	start := time.Now()
	if status := w.invoke(rw, r, start); status != 0 {
		w.logInvocation(r, status, start)
	}
}

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
		bodyTime = maxBodyTime
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
		return writeResult(rw, protect(decodeEvent(body), request), 0)
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
	defer mu.Unlock()
	if answered {
		return 0
	}
	answered = true
	timer.Stop()
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
	if timeout == 0 {
		return protect(event, request)
	}
	ch := make(chan result, 1)
	go func() { ch <- protect(event, request) }()
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
