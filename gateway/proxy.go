package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/history"
	"sless.dev/sless/rules"
)

// ProxyConfig tunes /fn/. Zero values take the documented defaults.
type ProxyConfig struct {
	// TimeoutMargin is added to a function's timeout before the gateway answers 504, so the
	// function's own timeout answer wins. Default 5s.
	TimeoutMargin time.Duration
	// ColdStartTimeout is how long a request may wait for an instance of a function at zero,
	// on top of its timeout: the function's timeout counts from when it gets the request
	// (its wrapper enforces it), as the add-on's readiness timeout is apart from its response
	// timeout, so a slow cold start is not the function's 504. Default 2m.
	ColdStartTimeout time.Duration
	// MaxHeldPerFunction caps requests in flight (including those held while a function
	// scales from zero) for one function. Default 1000.
	MaxHeldPerFunction int64
	// MaxHeld caps requests in flight in total. Default 10000.
	MaxHeld int64
	// RetryAfter is sent with 503 answers. Default 1s.
	RetryAfter time.Duration
}

func (c ProxyConfig) withDefaults() ProxyConfig {
	if c.TimeoutMargin <= 0 {
		c.TimeoutMargin = rules.InvocationMargin
	}
	if c.ColdStartTimeout <= 0 {
		c.ColdStartTimeout = 2 * time.Minute
	}
	if c.MaxHeldPerFunction <= 0 {
		c.MaxHeldPerFunction = 1000
	}
	if c.MaxHeld <= 0 {
		c.MaxHeld = 10000
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = time.Second
	}
	return c
}

// errFunctionTimeout is the cause of a request context ended by the function's timeout.
var errFunctionTimeout = errors.New("function timeout")

// w3c is fixed rather than the global propagator: functions always get traceparent.
var w3c = propagation.TraceContext{}

// fnProxy serves /fn/{ns}/{name}[/rest] and function hosts by forwarding to the backend's
// transport.
type fnProxy struct {
	cfg ProxyConfig
	// bodyIdle bounds the wait for each byte of a call's body (ConnLimits.BodyIdleTimeout).
	bodyIdle time.Duration
	router   backend.Router
	auth     Authenticator
	rec      history.Recorder
	log      *slog.Logger
	rp       *httputil.ReverseProxy
	held     heldRequests
	// async queues calls that prefer respond-async (nil: none); callbackHosts are the hosts
	// their callbacks may go to.
	async         backend.AsyncInvoker
	callbackHosts []string
	rejected      prometheus.Counter
	// coldStarts counts invocations that waited for an instance, coldStartTime how long
	// until the function's response began (by namespace, function and revision: "" where the
	// control plane has none).
	coldStarts    *prometheus.CounterVec
	coldStartTime *prometheus.HistogramVec
	// lastErrLog is the Unix second of the last forwarding-failure log line.
	lastErrLog atomic.Int64
	// master signs each call with its function's key (nil: unsigned).
	master []byte
}

// target is what Rewrite and ModifyResponse need to know about one proxied request.
type target struct {
	fn                  string // <namespace>/<name>
	host, path, rawPath string
	// identity is the verified caller of a route that requires auth, nil otherwise.
	identity *Identity
	// body is the request body under its read deadline; nil without one.
	body *deadlineBody
	// start is when the gateway got the request; coldStart is what the backend said; ttfb
	// is when the function's answer began, streamed whether it had no length or upgraded.
	start     time.Time
	coldStart bool
	ttfb      time.Duration
	streamed  bool
	// revision is the function's revision the call went to ("" when it has none).
	revision string
	// memoryMB is the route's, recorded for usage.
	memoryMB int32
	// sandbox: the call came on the shared origin (statusWriter.sandbox).
	sandbox bool
	// timeout and streamIdle are the route's bounds; cancel ends the request to the function
	// (a stream that went idle).
	timeout, streamIdle time.Duration
	cancel              context.CancelCauseFunc
	// rc is the caller's response: its body stays the transport's once the function answers.
	rc *http.ResponseController
}

type targetKey struct{}

// Headers the gateway owns on requests to functions: the verified identity of a caller of
// a route that requires auth. A client's own values of these, and of every other X-Sless-*
// header (the trigger headers the dispatcher sets, the attempt), are always removed.
const (
	HeaderSubject   = "X-Sless-Subject"
	HeaderNamespace = "X-Sless-Namespace"
)

// fnSandbox is the Content-Security-Policy of every /fn/ response on the shared origin: the
// document gets an opaque origin, so its scripts cannot read the console's storage, call
// /v1 with the page's credentials or register a service worker. Functions that need an
// origin of their own are served on their function host.
const fnSandbox = "sandbox allow-scripts allow-forms allow-popups allow-downloads allow-modals"

// sharedOriginDropped are response headers a function may not send on the shared origin:
// they would widen a service worker's scope, set cookies or clear the console's storage.
var sharedOriginDropped = []string{"Service-Worker-Allowed", "Set-Cookie", "Clear-Site-Data"}

func newFnProxy(cfg Config, log *slog.Logger) *fnProxy {
	p := &fnProxy{cfg: cfg.Proxy, bodyIdle: cfg.Conns.BodyIdleTimeout, router: cfg.Backend, auth: cfg.Auth, rec: cfg.Recorder, log: log,
		async: cfg.Async, callbackHosts: cfg.CallbackHosts, master: cfg.IdentityMaster}
	p.held.perFunction = map[string]*atomic.Int64{}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		ModifyResponse: p.modifyResponse,
		Transport:      cfg.Backend.Transport(),
		ErrorHandler:   p.proxyError,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return p
}

// rewrite points the outgoing request at the function: routing host, path without the /fn/
// prefix, X-Forwarded-*, the W3C trace context of the gateway's span, and the caller's
// verified identity instead of its credentials, signed with the function's key last, over
// the request as it goes out. ReverseProxy has already removed hop-by-hop headers
// (Proxy-Authorization among them) and the client's X-Forwarded-*.
func (p *fnProxy) rewrite(pr *httputil.ProxyRequest) {
	t := pr.In.Context().Value(targetKey{}).(*target)
	pr.Out.URL.Scheme, pr.Out.URL.Host = "http", t.host
	pr.Out.URL.Path, pr.Out.URL.RawPath = t.path, t.rawPath
	pr.Out.Host = t.host
	pr.SetXForwarded()
	functionHeader(pr.Out.Header, t.identity)
	w3c.Inject(pr.Out.Context(), propagation.HeaderCarrier(pr.Out.Header))
	if p.master != nil {
		ns, name, _ := strings.Cut(t.fn, "/")
		rules.SignRequest(pr.Out, rules.FunctionKey(p.master, ns, name), time.Now())
	}
}

// functionHeader replaces the caller's credentials, trace context, client-address claims
// and X-Sless-* headers in h, a request going to a function, by the verified identity (nil:
// none). X-Forwarded-* and Forwarded are the gateway's to set (ReverseProxy removes the
// caller's; the asynchronous path does it itself).
func functionHeader(h http.Header, id *Identity) {
	for _, k := range []string{"Authorization", "Cookie", "Traceparent", "Tracestate", "X-Real-Ip"} {
		h.Del(k)
	}
	for k := range h {
		if strings.HasPrefix(k, "X-Sless-") { // canonical keys: net/http and Clone keep them so
			delete(h, k)
		}
	}
	if id != nil {
		h.Set(HeaderSubject, id.Subject)
		if id.Namespace != "" {
			h.Set(HeaderNamespace, id.Namespace)
		}
	}
}

// errBodyTimeout fails a forward whose request body did not arrive in time: the function
// may have answered what reached it, but the caller gets 408.
var errBodyTimeout = errors.New("request body timed out")

// modifyResponse refuses an answer to a request whose body was cut off at its deadline,
// turns the backend's cold-start signal into sless's own header (counted), notes the time to
// first byte and puts a stream under its bounds (streamBody). The shared origin's rules are
// applied where the answer is written (statusWriter.sandboxHeader), so they also hold for
// informational answers, which skip ModifyResponse; an upgrade's 101 is the exception here.
func (p *fnProxy) modifyResponse(resp *http.Response) error {
	t, _ := resp.Request.Context().Value(targetKey{}).(*target)
	if t == nil {
		return nil
	}
	if t.body.expired() {
		return errBodyTimeout
	}
	if t.revision != "" {
		resp.Header.Set(rules.HeaderRevision, t.revision) // the function's own value is not believed
	}
	// A function may answer before the transport has read the body to its end (past
	// Content-Length it reads once more to see EOF). HTTP/1's server consumes and closes an
	// unread body at the answer's first write, which fails that read, and the transport then
	// closes the function's connection under the answer, cutting a stream. Full duplex leaves
	// the body to the transport (HTTP/2 has no such step: ErrNotSupported, ignored). The
	// gateway's own refusals keep the default: an unread body is closed with them.
	_ = t.rc.EnableFullDuplex()
	// ReverseProxy writes an upgrade's 101 itself, past the statusWriter: a browser takes a
	// WebSocket handshake's cookies, so the shared origin's rules are applied here.
	if t.sandbox && resp.StatusCode == http.StatusSwitchingProtocols {
		sandboxed(resp.Header)
	}
	t.ttfb = time.Since(t.start)
	t.streamed = resp.ContentLength < 0 || resp.StatusCode == http.StatusSwitchingProtocols
	// The backend's value comes first; one a function sent after it is not believed.
	t.coldStart = resp.Header.Get(rules.HeaderBackendColdStart) == "true"
	resp.Header.Del(rules.HeaderBackendColdStart)
	resp.Header.Set(rules.HeaderColdStart, strconv.FormatBool(t.coldStart))
	if resp.StatusCode == http.StatusSwitchingProtocols {
		newUpgradeBody(resp, t.streamIdle, t.timeout, t.cancel)
	} else {
		newStreamBody(resp, t.streamIdle, t.timeout, t.cancel)
	}
	if t.coldStart && p.coldStarts != nil {
		ns, name, _ := strings.Cut(t.fn, "/")
		p.coldStarts.WithLabelValues(ns, name, t.revision).Inc()
		p.coldStartTime.WithLabelValues(ns, name, t.revision).Observe(time.Since(t.start).Seconds())
	}
	return nil
}

// splitFnPath splits an escaped /fn/ path into namespace, name and the escaped rest ("/" when
// empty).
func splitFnPath(escaped string) (ns, name, rest string, ok bool) {
	p, ok := strings.CutPrefix(escaped, "/fn/")
	if !ok {
		return "", "", "", false
	}
	ns, p, ok = strings.Cut(p, "/")
	if !ok {
		return "", "", "", false
	}
	name, rest, _ = strings.Cut(p, "/")
	if validName("", ns) != nil || validName("", name) != nil {
		return "", "", "", false
	}
	return ns, name, "/" + rest, true
}

// splitFunctionHost reads <name>.<ns>.<domain>[.][:port] ("" domain: never). inDomain is
// true for every host of the functions domain, the domain itself included, whether or not
// it names a function.
func splitFunctionHost(host, domain string) (ns, name string, inDomain, ok bool) {
	if domain == "" {
		return "", "", false, false
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == domain {
		return "", "", true, false
	}
	labels, inDomain := strings.CutSuffix(host, "."+domain)
	if !inDomain {
		return "", "", false, false
	}
	name, ns, ok = strings.Cut(labels, ".")
	if !ok || validName("", ns) != nil || validName("", name) != nil {
		return "", "", true, false
	}
	return ns, name, true, true
}

// ServeHTTP serves /fn/<ns>/<name>[/rest] on the shared origin.
func (p *fnProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ns, name, rest, ok := splitFnPath(r.URL.EscapedPath())
	if !ok {
		writeError(w, http.StatusNotFound, "no function here: call /fn/<namespace>/<function>[/path]")
		return
	}
	sw, ok := w.(*statusWriter)
	if !ok {
		sw = &statusWriter{ResponseWriter: w}
	}
	sw.sandbox = true
	w = sw
	if workerFetch(r) {
		writeError(w, http.StatusForbidden, "functions cannot serve workers on the console's origin; serve it from the function's own host")
		return
	}
	p.serve(w, r, ns, name, rest, "")
}

// serveHost serves a request to a function host: the whole path is the function's, on an
// origin of its own. A label that names no function may be a tag host, <tag>-<function>.
func (p *fnProxy) serveHost(w http.ResponseWriter, r *http.Request, ns, label string) {
	name, tag := label, ""
	if _, err := p.router.Route(ns, label); err != nil {
		if t, fn, ok := rules.SplitTagHost(label); ok {
			name, tag = fn, t
		}
	}
	p.serve(w, r, ns, name, r.URL.EscapedPath(), tag)
}

// workerFetch reports a browser fetching a service worker or a script for the gateway's own
// origin: the console never loads function content that way.
func workerFetch(r *http.Request) bool {
	if r.Header.Get("Service-Worker") != "" {
		return true
	}
	switch r.Header.Get("Sec-Fetch-Dest") {
	case "serviceworker", "sharedworker", "worker", "script":
		return r.Header.Get("Sec-Fetch-Site") == "same-origin"
	}
	return false
}

// serve calls the function ns/name (the revision of tag when set, from a tag host).
func (p *fnProxy) serve(w http.ResponseWriter, r *http.Request, ns, name, rest, tag string) {
	start := time.Now()
	path, err := url.PathUnescape(rest)
	if err != nil {
		writeError(w, http.StatusBadRequest, "malformed path escape")
		return
	}
	if rules.ReservedPath(path) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("%s is the platform's own path on every function, answered by its runtime for probes and pre-warms; it is not served to callers", rules.HealthPath))
		return
	}
	route, err := p.router.Route(ns, name)
	if err != nil {
		if code, _ := statusOf(err); code == http.StatusNotFound {
			writeError(w, http.StatusNotFound, err.Error())
			return
		}
		p.log.ErrorContext(r.Context(), "route lookup failed", "namespace", ns, "function", name, "error", err)
		writeError(w, http.StatusBadGateway, "route lookup failed")
		return
	}
	id, code, msg := p.refuse(r, ns, name, route)
	var host, revision string
	if code == 0 {
		host, revision, code, msg = p.pick(r, ns, name, route, tag, id)
	}
	if code != 0 {
		if code == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", strconv.Itoa(int(p.cfg.RetryAfter.Seconds())))
		}
		writeError(w, code, msg)
		return
	}
	key := ns + "/" + name
	if !p.held.acquire(key, p.cfg.MaxHeldPerFunction, p.cfg.MaxHeld) {
		p.rejected.Inc()
		w.Header().Set("Retry-After", strconv.Itoa(int(p.cfg.RetryAfter.Seconds())))
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("too many requests in flight for function %s; retry later", key))
		return
	}
	defer p.held.release(key)

	if preferAsync(r.Header) {
		p.serveAsync(w, r, ns, name, rest, route, id)
		return
	}
	// The body must arrive within the function's timeout (the longest one when it has none):
	// before the invocation's own deadline, so a trickling body is a 408, not a 504. Until
	// here it had the server's body timeout (ServeHTTP), which asynchronous calls keep.
	bodyLimit := route.Timeout
	if bodyLimit <= 0 {
		bodyLimit = rules.MaxTimeout
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	t := &target{fn: key, host: host, path: path, rawPath: rest, identity: id,
		body: rebound(w, r, bodyLimit, p.bodyIdle), start: start, revision: revision, memoryMB: route.MemoryMB,
		timeout: route.Timeout, streamIdle: route.StreamIdle, cancel: cancel, rc: http.NewResponseController(w)}
	defer t.body.finish() // before the handler returns: the transport may still read the body
	ctx = context.WithValue(ctx, targetKey{}, t)
	if route.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, p.cfg.ColdStartTimeout+route.Timeout+p.cfg.TimeoutMargin, errFunctionTimeout)
		defer cancel()
	}
	sw, ok := w.(*statusWriter)
	if !ok {
		sw = &statusWriter{ResponseWriter: w}
	}
	t.sandbox = sw.sandbox
	defer func() { p.record(ctx, t, ns, name, sw.status, sw.bytes) }()
	p.rp.ServeHTTP(sw, r.WithContext(ctx))
}

// refuse decides whether a resolved function may be called now: 401/403 for a trigger that
// requires auth, 503 while disabled or not deployed. It returns the verified caller of a
// route that requires auth.
func (p *fnProxy) refuse(r *http.Request, ns, name string, route backend.Route) (*Identity, int, string) {
	var id *Identity
	if route.RequireAuth {
		caller, err := authenticateRequest(p.auth, r)
		if err != nil {
			return nil, http.StatusUnauthorized, err.Error()
		}
		if err := allowNamespace(caller, ns); err != nil {
			return nil, http.StatusForbidden, err.Error()
		}
		id = &caller
	}
	if route.Disabled {
		return nil, http.StatusServiceUnavailable, fmt.Sprintf("function %s/%s is disabled: its http trigger is off", ns, name)
	}
	return id, 0, ""
}

// pick chooses where a call goes: the revision of a tag (a tag host or X-Sless-Tag), a
// revision by name (X-Sless-Revision, for a caller of the function's own tenant only), else
// one by the traffic's weights (sticky per X-Sless-Revision-Key when sent). A function
// without revisions goes to its route's host. It answers an error status and message
// instead when none can be called.
func (p *fnProxy) pick(r *http.Request, ns, name string, route backend.Route, tag string, id *Identity) (host, revision string, code int, msg string) {
	if tag == "" {
		tag = r.Header.Get(rules.HeaderTag)
	}
	i := -1
	switch rev := r.Header.Get(rules.HeaderRevision); {
	case tag != "":
		if i = slices.IndexFunc(route.Targets, func(t backend.RouteTarget) bool { return t.Tag == tag }); i < 0 {
			return "", "", http.StatusNotFound, fmt.Sprintf("function %s/%s has no tag %q; tags are set in its traffic", ns, name, tag)
		}
	case rev != "":
		if id == nil {
			caller, err := authenticateRequest(p.auth, r)
			if err != nil {
				return "", "", http.StatusUnauthorized, rules.HeaderRevision + " is for callers of the function's own tenant: " + err.Error()
			}
			if err := allowNamespace(caller, ns); err != nil {
				return "", "", http.StatusForbidden, err.Error()
			}
		}
		if i = slices.IndexFunc(route.Targets, func(t backend.RouteTarget) bool { return t.Revision == rev }); i < 0 {
			return "", "", http.StatusNotFound, fmt.Sprintf("revision %q of function %s/%s is not serving: give it traffic or a tag first", rev, ns, name)
		}
	case len(route.Targets) > 0:
		i = rules.PickTarget(route.Targets, func(t *backend.RouteTarget) int32 { return t.Percent }, r.Header.Get(rules.HeaderRevisionKey))
	}
	host = route.Host
	if i >= 0 {
		host, revision = route.Targets[i].Host, route.Targets[i].Revision
	}
	if host == "" {
		return "", "", http.StatusServiceUnavailable, fmt.Sprintf("function %s/%s is not deployed yet; retry when its phase is Ready", ns, name)
	}
	return host, revision, 0, ""
}

// proxyError answers a failed forward: 408 for a body that did not arrive, 504 for the
// function's timeout, nothing for a client that went away, 502 otherwise.
func (p *fnProxy) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	ctx := r.Context()
	t := ctx.Value(targetKey{}).(*target)
	if t.revision != "" {
		w.Header().Set(rules.HeaderRevision, t.revision)
	}
	switch {
	case errors.Is(err, errBodyTimeout) || t.body.expired():
		writeError(w, http.StatusRequestTimeout, fmt.Sprintf("the request body did not arrive in time: no byte for %s, or not all of it within the function's timeout; the call was cancelled", p.bodyIdle))
	case context.Cause(ctx) == errFunctionTimeout:
		writeError(w, http.StatusGatewayTimeout, "the function did not answer within its timeout")
	case errors.Is(ctx.Err(), context.Canceled) || t.body.broken():
		// The caller went away, or cut its body off: nobody is left to answer.
		if sw, ok := w.(*statusWriter); ok {
			sw.status = statusClientClosed
		}
	default:
		// One line per second at most: an unreachable interceptor fails every request.
		if now := time.Now().Unix(); p.lastErrLog.Swap(now) != now {
			p.log.WarnContext(ctx, "Warning: forwarding to the function failed; check the interceptor", "host", t.host, "error", err)
		}
		writeError(w, http.StatusBadGateway, "the function could not be reached")
	}
}

// statusClientClosed records invocations whose caller disconnected.
const statusClientClosed = history.HTTPClientClosed

// record sends the invocation to the history, off the request path (Recorder never blocks).
func (p *fnProxy) record(ctx context.Context, t *target, ns, name string, status int, bytes int64) {
	if p.rec == nil {
		return
	}
	if status == 0 {
		status = http.StatusOK
	}
	var traceID string
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		traceID = sc.TraceID().String()
	}
	rec := history.HTTPRecord(ns, name, t.start, time.Since(t.start), status, traceID)
	rec.ColdStart, rec.Revision = t.coldStart, t.revision
	rec.TTFB, rec.Bytes, rec.Streamed, rec.MemoryMB = t.ttfb, bytes, t.streamed, t.memoryMB
	p.rec.Record(rec)
}

// heldRequests counts requests in flight per function and in total.
type heldRequests struct {
	total       atomic.Int64
	mu          sync.RWMutex
	perFunction map[string]*atomic.Int64
}

func (h *heldRequests) counter(key string) *atomic.Int64 {
	h.mu.RLock()
	c := h.perFunction[key]
	h.mu.RUnlock()
	if c != nil {
		return c
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if c = h.perFunction[key]; c == nil {
		c = new(atomic.Int64)
		h.perFunction[key] = c
	}
	return c
}

func (h *heldRequests) acquire(key string, perFunction, total int64) bool {
	if h.total.Add(1) > total {
		h.total.Add(-1)
		return false
	}
	if c := h.counter(key); c.Add(1) > perFunction {
		c.Add(-1)
		h.total.Add(-1)
		return false
	}
	return true
}

func (h *heldRequests) release(key string) {
	h.counter(key).Add(-1)
	h.total.Add(-1)
}

// statusWriter remembers the status code and the body's bytes, and keeps streaming (Flush)
// and upgrades working. With stall set, every write must make progress within it (a client
// that stopped reading is cut off instead of holding the handler). With sandbox set it is the one place the
// shared origin's rules are applied to what goes out (see sandboxHeader).
type statusWriter struct {
	http.ResponseWriter
	status  int
	bytes   int64 // of the body, written through Write (not an upgraded connection's)
	stall   time.Duration
	rc      *http.ResponseController
	sandbox bool
}

func (w *statusWriter) WriteHeader(code int) {
	if w.sandbox && !w.sandboxHeader(code) {
		return
	}
	// An informational answer is not the status of the request.
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// sandboxHeader applies the shared origin's rules to the header of an answer with code and
// reports whether it goes out. Every answer that can carry a document gets the sandbox CSP
// and loses the headers a function may not send there. Informational answers other than
// 100 Continue are dropped: a browser acts on their headers (Link preloads, and a 1xx's
// headers are sent in place of the final one's in ReverseProxy, which clears the writer's
// header after forwarding it), so neither the function's headers nor the gateway's CSP may
// be spent on one. 100 Continue goes out bare; 101 Switching Protocols is an upgrade's final
// answer and is treated as one.
func (w *statusWriter) sandboxHeader(code int) bool {
	h := w.ResponseWriter.Header()
	if code < 200 && code != http.StatusSwitchingProtocols {
		if code != http.StatusContinue {
			return false
		}
		clear(h)
		return true
	}
	sandboxed(h)
	return true
}

// sandboxed applies the shared origin's rules to h, the header of an answer that may carry a
// document or set state in the browser: the headers a function may not send there go, the
// sandbox policy comes first.
func sandboxed(h http.Header) {
	for _, k := range sharedOriginDropped {
		h.Del(k)
	}
	// A function's own policy stays beside the sandbox: a browser enforces both.
	csp := []string{fnSandbox}
	for _, v := range h.Values("Content-Security-Policy") {
		if v != fnSandbox {
			csp = append(csp, v)
		}
	}
	h["Content-Security-Policy"] = csp
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	w.extendWrite()
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) extendWrite() {
	if w.stall <= 0 {
		return
	}
	if w.rc == nil {
		w.rc = http.NewResponseController(w.ResponseWriter)
	}
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.stall))
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	w.extendWrite()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// writeError answers with the API's JSON error body.
func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(api.Error{Error: msg})
}
