package gateway

import (
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/history"
)

// invocationQuery parses ?limit=&before= of the invocations endpoint.
func invocationQuery(ns, name, limit, before string) (history.Query, error) {
	q := history.Query{Namespace: ns, Function: name, Before: before}
	if limit != "" {
		n, err := strconv.Atoi(limit)
		if err != nil || n < 1 {
			return q, invalid("limit", "%q is not a positive integer; use 1-%d", limit, history.MaxLimit)
		}
		q.Limit = n
	}
	return q, nil
}

// invocationsOf converts a history page to the wire model.
func invocationsOf(p history.Page) api.Invocations {
	out := api.Invocations{Invocations: make([]api.Invocation, len(p.Records)), Next: p.Next}
	for i, r := range p.Records {
		out.Invocations[i] = api.Invocation{
			ID: r.ID, Function: r.Function, Trigger: r.Trigger, Kind: string(r.Kind), Start: r.Start,
			DurationMs: float64(r.Duration.Microseconds()) / 1000, Status: r.Status, HTTPStatus: r.HTTPStatus,
			Error: r.Error, TraceID: r.TraceID, ColdStart: r.ColdStart, Revision: r.Revision,
			TTFBMs: float64(r.TTFB.Microseconds()) / 1000, BytesSent: r.Bytes, Streamed: r.Streamed,
		}
	}
	return out
}

// historyFunction is the function named by the path of a history read; a gateway without a
// history store answers 503.
func (s *Server) historyFunction(c echo.Context) (string, error) {
	name, err := nameParam(c)
	if err != nil {
		return "", err
	}
	return name, s.historyConfigured()
}

// historyConfigured answers a history read 503 on a gateway without a history store.
func (s *Server) historyConfigured() error {
	if s.cfg.History == nil {
		return &httpError{Code: http.StatusServiceUnavailable, Msg: "invocation history is not configured on this gateway (no database)"}
	}
	return nil
}

// invocationStats serves GET .../functions/{name}/stats?window=1h|24h from the history
// store's buckets, so a chart is one read however many invocations the window holds.
func (s *Server) invocationStats(c echo.Context) error {
	name, err := s.historyFunction(c)
	if err != nil {
		return err
	}
	w, err := history.ParseWindow(c.QueryParam("window"))
	if err != nil {
		return err
	}
	st, err := s.cfg.History.Stats(c.Request().Context(), history.StatsQuery{Namespace: c.Param("ns"), Function: name, Window: w})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, statsOf(st))
}

// statsOf converts a history stats read to the wire model.
func statsOf(s history.Stats) api.InvocationStats {
	out := api.InvocationStats{Window: s.Window.Name, BucketSec: int(s.Window.Bucket / time.Second), Start: s.Start, End: s.End,
		Total: summaryOf(s.Total), Buckets: make([]api.StatsBucket, len(s.Buckets))}
	for i, b := range s.Buckets {
		out.Buckets[i] = api.StatsBucket{Start: b.Start, InvocationSummary: summaryOf(b.Summary)}
	}
	return out
}

func summaryOf(s history.Summary) api.InvocationSummary {
	out := api.InvocationSummary{Count: s.Count, Errors: s.Errors}
	if s.Count > 0 {
		p50, p95 := millis(s.P50), millis(s.P95)
		out.P50Ms, out.P95Ms = &p50, &p95
	}
	return out
}

// millis is d in milliseconds, to the microsecond the history keeps.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// usage serves GET /v1/namespaces/{ns}/usage?from=&to=&by=hour|day|function from the history
// store's hourly rollups, so a month is one read of at most 744 rows per function.
func (s *Server) usage(c echo.Context) error {
	if err := s.historyConfigured(); err != nil {
		return err
	}
	q := history.UsageQuery{Namespace: c.Param("ns"), By: history.UsageBy(c.QueryParam("by"))}
	for field, at := range map[string]*time.Time{"from": &q.From, "to": &q.To} {
		v := c.QueryParam(field)
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return invalid(field, "%q is not an RFC 3339 time such as 2026-03-01T00:00:00Z", v)
		}
		*at = t
	}
	u, err := s.cfg.History.Usage(c.Request().Context(), q)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, usageOf(u))
}

// usageOf converts a history usage report to the wire model.
func usageOf(u history.UsageReport) api.Usage {
	out := api.Usage{From: u.From, To: u.To, By: string(u.By), Rows: make([]api.UsageRow, len(u.Rows)), Total: usageFigures(u.Total)}
	for i, r := range u.Rows {
		row := api.UsageRow{Function: r.Function, UsageFigures: usageFigures(r.Usage)}
		switch u.By {
		case history.UsageByHour:
			row.Hour = &r.Start
		case history.UsageByDay:
			row.Day = r.Start.Format(time.DateOnly)
		case history.UsageByFunction:
		}
		out.Rows[i] = row
	}
	return out
}

func usageFigures(u history.Usage) api.UsageFigures {
	return api.UsageFigures{Invocations: u.Invocations, Errors: u.Errors, ColdStarts: u.ColdStarts,
		DurationMs: float64(u.DurationUS) / 1000, GBSeconds: u.GBSeconds(), BytesOut: u.BytesOut}
}
