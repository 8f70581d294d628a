package gateway

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/history"
)

// Headers of an asynchronous call.
const (
	// HeaderCallbackURL asks for the final invocation to be POSTed there (hosts the operator
	// allows only).
	HeaderCallbackURL = "X-Sless-Callback-URL"
	// HeaderInvocationID names the invocation in the 202 answer.
	HeaderInvocationID = "X-Sless-Invocation-Id"
	// MaxAsyncBody caps the request body of an asynchronous call: it travels as one message.
	MaxAsyncBody      = 1 << 20
	maxIdempotencyKey = 255
)

// preferAsync reports whether the caller asked for an asynchronous invocation (RFC 7240
// Prefer: respond-async, among other preferences or not).
func preferAsync(h http.Header) bool {
	for _, v := range h.Values("Prefer") {
		for _, pref := range strings.Split(v, ",") {
			token, _, _ := strings.Cut(pref, ";")
			if strings.EqualFold(strings.TrimSpace(token), "respond-async") {
				return true
			}
		}
	}
	return false
}

// hopHeaders are removed from a request replayed later, as ReverseProxy removes them from
// one it forwards; so are the asynchronous call's own headers.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Prefer", HeaderCallbackURL, "Content-Length", "Expect",
	"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}

// serveAsync queues the call and answers 202 with the invocation's Location, or the
// existing invocation of a repeated Idempotency-Key.
func (p *fnProxy) serveAsync(w http.ResponseWriter, r *http.Request, ns, name, rest string, route backend.Route, id *Identity) {
	switch {
	case p.async == nil:
		writeError(w, errNoAsync.Code, errNoAsync.Msg)
		return
	case route.AsyncAttempts == 0:
		writeError(w, http.StatusConflict, fmt.Sprintf("function %s/%s does not take asynchronous invocations: enable them in its settings (async.enabled), or call it without Prefer: respond-async", ns, name))
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if len(key) > maxIdempotencyKey || strings.ContainsFunc(key, func(c rune) bool { return c < 0x20 || c > 0x7e }) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Idempotency-Key must be at most %d printable ASCII characters", maxIdempotencyKey))
		return
	}
	callback, err := p.callbackURL(r.Header.Get(HeaderCallbackURL))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	// The body must arrive within the server's body timeout, set when the request arrived
	// (Server.ServeHTTP); a read past it fails and the caller gets 408.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxAsyncBody))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("an asynchronous call's body is at most %d bytes; send a reference to larger data instead", MaxAsyncBody))
		} else {
			writeError(w, http.StatusRequestTimeout, "the request body did not arrive in time")
		}
		return
	}
	h := r.Header.Clone()
	for _, k := range hopHeaders {
		h.Del(k)
	}
	functionHeader(h, id)
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		h.Set("X-Forwarded-For", ip)
	}
	h.Set("X-Forwarded-Host", r.Host)
	h.Set("X-Forwarded-Proto", map[bool]string{true: "https", false: "http"}[r.TLS != nil])
	hash := requestHash(r.Method, rest, r.URL.RawQuery, body, id)
	inv, created, err := p.async.Enqueue(r.Context(), history.AsyncRequest{
		Namespace: ns, Function: name, Method: r.Method, Path: rest, RawQuery: r.URL.RawQuery, Header: h, Body: body,
		IdempotencyKey: key, RequestHash: hash, CallbackURL: callback, MaxAttempts: route.AsyncAttempts,
	})
	if err != nil {
		p.log.WarnContext(r.Context(), "Warning: an asynchronous invocation could not be queued", "function", ns+"/"+name, "error", err)
		w.Header().Set("Retry-After", strconv.Itoa(int(p.cfg.RetryAfter.Seconds())))
		writeError(w, http.StatusServiceUnavailable, "the invocation could not be queued (broker or database unavailable); nothing was queued: retry later")
		return
	}
	if !created && inv.RequestHash != hash {
		writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("Idempotency-Key %q was first used for another request to %s/%s (method, path, query, body or caller differ); send a new key for a new request", key, ns, name))
		return
	}
	w.Header().Set("Location", InvocationPath(ns, inv.ID))
	w.Header().Set(HeaderInvocationID, inv.ID)
	w.Header().Set("Preference-Applied", "respond-async")
	w.Header().Set("Content-Type", "application/json")
	out := inv.API()
	code := http.StatusAccepted
	switch {
	case created:
	case id != nil || p.tenantCaller(r, ns):
		code = http.StatusOK // the repeated key's invocation as it stands, for its tenant
	default:
		// Anyone may repeat a public call: they learn where it is, not what it answered.
		out = api.AsyncInvocation{ID: out.ID, Function: out.Function, Status: out.Status, Attempts: out.Attempts,
			MaxAttempts: out.MaxAttempts, CreatedAt: out.CreatedAt, UpdatedAt: out.UpdatedAt, IdempotencyKey: out.IdempotencyKey}
	}
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(out)
}

// requestHash fingerprints what an idempotency key is bound to: the request as the function
// would get it and the verified caller of a route that requires auth (nil: none).
func requestHash(method, path, rawQuery string, body []byte, id *Identity) string {
	h := sha256.New()
	for _, part := range []string{method, path, rawQuery} {
		_, _ = fmt.Fprintf(h, "%d:%s", len(part), part)
	}
	if id != nil {
		_, _ = fmt.Fprintf(h, "id %d:%s %d:%s", len(id.Subject), id.Subject, len(id.Namespace), id.Namespace)
	}
	_, _ = fmt.Fprintf(h, "body %d:", len(body))
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// tenantCaller reports whether r carries a valid token for namespace ns (a public route's
// caller need not send one).
func (p *fnProxy) tenantCaller(r *http.Request, ns string) bool {
	if r.Header.Get("Authorization") == "" {
		return false
	}
	caller, err := authenticateRequest(p.auth, r)
	return err == nil && allowNamespace(caller, ns) == nil
}

// InvocationPath is where an asynchronous invocation is read back.
func InvocationPath(ns, id string) string { return "/v1/namespaces/" + ns + "/invocations/" + id }

// callbackURL checks a requested callback against the hosts the operator allows ("" none).
func (p *fnProxy) callbackURL(raw string) (string, error) {
	if raw == "" {
		return "", nil
	}
	if len(p.callbackHosts) == 0 {
		return "", errors.New(HeaderCallbackURL + ": callbacks are off on this platform; the operator allows target hosts with --async-callback-hosts")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.Fragment != "" {
		return "", fmt.Errorf("%s: %q is not an absolute http(s) URL without credentials", HeaderCallbackURL, raw)
	}
	if !hostAllowed(u.Hostname(), p.callbackHosts) {
		return "", fmt.Errorf("%s: host %s is not one the operator allows for callbacks (%s)", HeaderCallbackURL, u.Hostname(), strings.Join(p.callbackHosts, ", "))
	}
	return u.String(), nil
}

// hostAllowed matches host against entries "example.com" (exactly), "*.example.com" (any
// subdomain, not example.com itself) and addresses ("10.0.0.7", "::1"), case-insensitively
// and ignoring a final dot. It is the one place the rule lives: sless dev's gateway uses it
// too, and the dispatcher POSTs only to URLs taken here (it narrows what it dials further:
// dispatcher/callback.go).
func hostAllowed(host string, allowed []string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if host == "" {
		return false
	}
	if ip, err := netip.ParseAddr(host); err == nil { // an address matches only itself, never a "*." entry
		for _, a := range allowed {
			if b, err := netip.ParseAddr(strings.Trim(strings.TrimSpace(a), "[]")); err == nil && b.Unmap() == ip.Unmap() {
				return true
			}
		}
		return false
	}
	for _, a := range allowed {
		a = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(a), "."))
		if suffix, ok := strings.CutPrefix(a, "*."); ok {
			if suffix == "" {
				continue
			}
			if strings.HasSuffix(host, "."+suffix) {
				return true
			}
		} else if host == a {
			return true
		}
	}
	return false
}

// getAsyncInvocation serves GET /v1/namespaces/{ns}/invocations/{id}.
func (s *Server) getAsyncInvocation(c echo.Context) error {
	if s.cfg.Async == nil {
		return errNoAsync
	}
	id := c.Param("id")
	if !history.ValidAsyncID(id) {
		return &httpError{Code: http.StatusNotFound, Msg: fmt.Sprintf("no invocation %q: invocation IDs are the 24 hex digits of a 202 answer's Location", id)}
	}
	inv, err := s.cfg.Async.GetAsync(c.Request().Context(), c.Param("ns"), id)
	if errors.Is(err, history.ErrAsyncNotFound) {
		return &httpError{Code: http.StatusNotFound, Msg: fmt.Sprintf("no invocation %s in namespace %s", id, c.Param("ns"))}
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, inv.API())
}

// listAsyncInvocations serves GET /v1/namespaces/{ns}/invocations?function=&status=&limit=.
func (s *Server) listAsyncInvocations(c echo.Context) error {
	if s.cfg.Async == nil {
		return errNoAsync
	}
	fn, status := c.QueryParam("function"), c.QueryParam("status")
	if fn != "" {
		if err := validName("function", fn); err != nil {
			return err
		}
	}
	switch status {
	case "", history.AsyncQueued, history.AsyncRunning, history.AsyncSucceeded, history.AsyncFailed:
	default:
		return invalid("status", "%q is not a state; use queued, running, succeeded or failed", status)
	}
	q, err := invocationQuery(c.Param("ns"), fn, c.QueryParam("limit"), "")
	if err != nil {
		return err
	}
	list, err := s.cfg.Async.ListAsync(c.Request().Context(), c.Param("ns"), fn, status, min(cmp.Or(q.Limit, history.DefaultLimit), history.MaxLimit))
	if err != nil {
		return err
	}
	out := api.AsyncInvocations{Invocations: make([]api.AsyncInvocation, len(list))}
	for i, inv := range list {
		out.Invocations[i] = inv.API()
	}
	return c.JSON(http.StatusOK, out)
}

var errNoAsync = &httpError{Code: http.StatusNotImplemented, Msg: "this gateway takes no asynchronous invocations: the operator starts it with a broker (--amqp-url) and a database (--database-url)"}
