// Package gateway is the sless front door: the /v1 REST API over a Backend, JWT tenancy, the
// /fn/ invocation proxy, the console, invocation history, metrics and traces.
package gateway

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"syscall"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/gateway/codecheck"
	"sless.dev/sless/history"
)

// Config wires a Server. Backend and Auth are required.
type Config struct {
	Backend backend.Backend
	// Auth verifies Bearer tokens of /v1 and of /fn/ calls whose trigger requires auth.
	Auth Authenticator
	// Sources stores uploads and reads them back; without it upload and source answer 503.
	Sources SourceStore
	// Limits caps uploads. Default buildkit.DefaultLimits().
	Limits buildkit.Limits
	// CodeCheck reviews uploads before they are stored; nil turns the check off.
	CodeCheck codecheck.Checker
	// Recorder gets one record per /fn/ invocation; nil records nothing.
	Recorder history.Recorder
	// History reads invocations back; nil answers the invocations endpoint with 503.
	History history.Reader
	Proxy   ProxyConfig
	// Async takes calls that prefer respond-async and serves /v1/namespaces/{ns}/invocations;
	// nil answers both with 501.
	Async backend.AsyncInvoker
	// CallbackHosts are the hosts ("example.com", "*.example.com") asynchronous invocations
	// may POST their outcome to; none turns callbacks off.
	CallbackHosts []string
	// IdentityMaster is the platform's master key: every /fn/ call is signed with the
	// function's key derived from it (rules.SignRequest), which the function's wrapper
	// checks. Nil sends calls unsigned, which a function holding a key refuses.
	IdentityMaster []byte
	// Conns bound connections and request bodies (see HTTPServer).
	Conns ConnLimits
	// FunctionsDomain, when set, serves each function on a host of its own,
	// <name>.<namespace>.<FunctionsDomain> (any path, any port), an origin apart from the
	// console's and the API's; /fn/ on the gateway's own host keeps working, sandboxed.
	FunctionsDomain string
	// Registry receives the gateway's Prometheus metrics, served on /metrics. Default: a new
	// registry with the Go and process collectors.
	Registry *prometheus.Registry
	// MetricsToken is the bearer token /metrics asks for: its series name every tenant's
	// namespaces, functions and revisions. Empty: /metrics is not served (404).
	MetricsToken string
	Logger       *slog.Logger
}

// Server is the gateway's http.Handler.
type Server struct {
	cfg     Config
	log     *slog.Logger
	echo    *echo.Echo
	proxy   *fnProxy
	metrics *metrics
	tracer  trace.Tracer
	conns   connCounter
}

// New builds a Server from cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Backend == nil || cfg.Auth == nil {
		return nil, errors.New("gateway: Backend and Auth are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Limits == (buildkit.Limits{}) {
		cfg.Limits = buildkit.DefaultLimits()
	}
	cfg.Proxy = cfg.Proxy.withDefaults()
	cfg.Conns = cfg.Conns.withDefaults(cfg.Proxy.MaxHeldPerFunction)
	cfg.FunctionsDomain = strings.ToLower(strings.Trim(cfg.FunctionsDomain, "."))
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
		cfg.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	s := &Server{cfg: cfg, log: cfg.Logger.With("component", "gateway"), tracer: otel.Tracer(tracerName), conns: connCounter{max: cfg.Conns.MaxConns, perClient: cfg.Conns.MaxConnsPerClient,
		requestsPerClient: cfg.Conns.MaxRequestsPerClient, idle: cfg.Conns.IdleTimeout, byClient: map[netip.Addr]*clientShare{}}}
	s.proxy = newFnProxy(cfg, s.log)
	m, err := newMetrics(cfg.Registry, s.proxy.held.total.Load, cfg.Recorder)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	s.proxy.rejected, s.proxy.coldStarts, s.proxy.coldStartTime = m.rejected, m.coldStarts, m.coldStartTime
	s.echo = s.routes()
	return s, nil
}

// ServeHTTP sends function hosts and /fn/ straight to the proxy (the hot path skips the
// router) and everything else through echo, each wrapped in a span and request metrics.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Every body is bounded before anything is decided: a request answered without reading
	// it (refused, unknown function, unauthenticated) still has net/http read the rest
	// before the answer goes out, and a trickling body would hold the connection forever.
	// The proxy moves the deadline to the function's timeout once it knows the function.
	// The server's own body comes back afterwards, so net/http's checks of what is left
	// unread (too large to read, 100-continue never sent: close instead) still see it.
	body := r.Body
	bounded := limitBody(w, r, s.cfg.Conns.BodyTimeout, s.cfg.Conns.BodyIdleTimeout)
	defer func() { r.Body = body; bounded.finish() }()
	if refuseOverCap(w, r) {
		return
	}
	// One client's share is of requests, not connections: HTTP/2 multiplies a connection.
	share, ok := s.conns.admitRequest(w, r)
	if !ok {
		return
	}
	defer share.release()
	ns, name, inDomain, ok := splitFunctionHost(r.Host, s.cfg.FunctionsDomain)
	switch {
	case ok:
		s.instrument("fn", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.proxy.serveHost(w, r, ns, name) }), w, r)
		return
	case inDomain:
		// The functions domain is functions' origins: the console and the API are never
		// served there, where a function's page could reach them same-origin.
		writeError(w, http.StatusNotFound, "no function here: function hosts are <name>.<namespace>."+s.cfg.FunctionsDomain+"; the API and the console are on the gateway's own host")
		return
	}
	if strings.HasPrefix(r.URL.Path, "/fn/") {
		s.instrument("fn", s.proxy, w, r)
		return
	}
	// The API's and the console's answers are never framed, sniffed into HTML or run as a
	// document with script: the console sets its own policy.
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	if !strings.HasPrefix(r.URL.Path, "/console/") {
		h.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'; sandbox")
	}
	handler := "api"
	if !strings.HasPrefix(r.URL.Path, "/v1/") {
		handler = "other"
	}
	s.instrument(handler, s.echo, w, r)
}

func (s *Server) routes() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	e.GET("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "ok\n") })
	e.GET("/metrics", s.metricsHandler())
	e.GET("/v1/openapi.yaml", func(c echo.Context) error { return c.Blob(http.StatusOK, "application/yaml", openapiSpec) })
	s.consoleRoutes(e)

	v1 := e.Group("/v1", s.authenticate)
	v1.GET("/whoami", s.whoami)
	ns := v1.Group("/namespaces/:ns", s.authorizeNamespace)
	ns.POST("/ensure", s.ensureNamespace)

	route(s, ns, "/functions", http.MethodPut, functionResource)
	ns.POST("/functions/:name/upload", uploadSource(s, backend.Backend.Functions, functionCode, useFunctionSource))
	ns.POST("/jobs/:name/upload", uploadSource(s, backend.Backend.Jobs, jobCode, useJobSource))
	ns.GET("/functions/:name/source", s.getSource)
	ns.GET("/functions/:name/revisions", s.listRevisions)
	ns.GET("/functions/:name/revisions/:rev", s.getRevision)
	ns.POST("/functions/:name/rollback", s.rollback)
	ns.GET("/functions/:name/invocations", s.listInvocations)
	ns.GET("/functions/:name/stats", s.invocationStats)
	ns.GET("/usage", s.usage)
	ns.GET("/invocations", s.listAsyncInvocations)
	ns.GET("/invocations/:id", s.getAsyncInvocation)
	ns.GET("/functions/:name/logs", s.logsHandler(backend.LogFunction))
	ns.GET("/functions/:name/builds/latest/logs", s.logsHandler(backend.LogBuild))
	ns.GET("/jobs/:name/logs", s.logsHandler(backend.LogJob))
	route(s, ns, "/triggers", http.MethodPatch, triggerResource)
	route(s, ns, "/jobs", http.MethodPut, jobResource)
	route(s, ns, "/secrets", http.MethodPut, secretResource)
	return e
}

// metricsHandler serves the Prometheus registry to callers with the metrics token only,
// compared in constant time; no tenant's token is one.
func (s *Server) metricsHandler() echo.HandlerFunc {
	metrics := echo.WrapHandler(promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{}))
	want := []byte(s.cfg.MetricsToken)
	return func(c echo.Context) error {
		if len(want) == 0 {
			return &httpError{Code: http.StatusNotFound, Msg: "/metrics is off: start the gateway with --metrics-token-file and scrape with Authorization: Bearer <that token>"}
		}
		got, err := bearerToken(c.Request())
		if err != nil || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="metrics"`)
			return &httpError{Code: http.StatusUnauthorized, Msg: "/metrics needs Authorization: Bearer <the metrics token> (the gateway's --metrics-token-file)"}
		}
		return metrics(c)
	}
}

// handleError is the one place errors become responses: user mistakes get their status and
// field, anything unexpected a logged 500 without internals.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	code, body := s.errorResponse(c.Request().Context(), err)
	if code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests {
		c.Response().Header().Set("Retry-After", "5")
	}
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(code)
		return
	}
	_ = c.JSON(code, body)
}

func (s *Server) errorResponse(ctx context.Context, err error) (int, api.Error) {
	var (
		he *httpError
		ee *echo.HTTPError
		qe *history.QueryError
		ue *history.UnavailableError
	)
	if code, field := statusOf(err); code != 0 {
		return code, api.Error{Error: err.Error(), Field: field}
	}
	if errors.Is(err, syscall.ENOSPC) {
		s.log.ErrorContext(ctx, "request failed: no space left", "error", err)
		return http.StatusInsufficientStorage, api.Error{Error: "the server's disk is full; nothing was changed: free disk space and retry"}
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return http.StatusRequestTimeout, api.Error{Error: fmt.Sprintf("the request body did not arrive within %s; send it faster or in a smaller upload", s.cfg.Conns.BodyTimeout)}
	}
	if ve, ok := buildkit.AsValidationError(err); ok {
		return ve.StatusCode(), api.Error{Error: ve.Error(), Field: "source"}
	}
	switch {
	case errors.As(err, &he):
		if he.Code >= 500 {
			s.log.ErrorContext(ctx, "request failed", "error", err)
		}
		return he.Code, api.Error{Error: he.Msg, Field: he.Field}
	case errors.As(err, &qe):
		return http.StatusBadRequest, api.Error{Error: qe.Error(), Field: qe.Field}
	case errors.As(err, &ue):
		s.log.WarnContext(ctx, "Warning: invocation history unavailable", "error", err)
		return http.StatusServiceUnavailable, api.Error{Error: "the invocation history database is unavailable; invocations are still served and recorded when it is back; retry later"}
	case errors.As(err, &ee):
		msg, _ := ee.Message.(string)
		if msg == "" {
			msg = http.StatusText(ee.Code)
		}
		return ee.Code, api.Error{Error: msg}
	case errors.Is(err, context.Canceled):
		return 499, api.Error{Error: "request canceled"}
	}
	s.log.ErrorContext(ctx, "request failed", "error", err)
	return http.StatusInternalServerError, api.Error{Error: "internal error; the gateway log has the details"}
}

// Routes lists the REST routes (for documentation checks).
func (s *Server) Routes() []*echo.Route { return s.echo.Routes() }
