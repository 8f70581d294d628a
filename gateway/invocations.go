package gateway

import (
	"strconv"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/history"
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
			Error: r.Error, TraceID: r.TraceID, ColdStart: r.ColdStart,
		}
	}
	return out
}
