// Package history records function invocations (HTTP, event, cron, job) and reads them back,
// newest first. Writers never block or fail an invocation: a record that cannot be stored is
// dropped and counted. Two stores implement it: PostgreSQL (Postgres) for the platform and a
// bounded in-memory ring (Memory) for `sless dev` without a database.
package history

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"sless.dev/sless/rules"
)

// Kind is what fired an invocation.
type Kind string

const (
	KindHTTP  Kind = "http"
	KindEvent Kind = "event"
	KindCron  Kind = "cron"
	KindJob   Kind = "job"
	KindAsync Kind = "async"
)

// Outcome values for Record.Status.
const (
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
	StatusTimeout   = "timeout"
)

// Record is one invocation. ID is assigned by the store and ignored by Recorder.Record.
type Record struct {
	ID         int64         `json:"id"`
	Namespace  string        `json:"namespace"`
	Function   string        `json:"function"`
	Trigger    string        `json:"trigger,omitempty"`
	Kind       Kind          `json:"kind"`
	Start      time.Time     `json:"start"`
	Duration   time.Duration `json:"durationNs"`
	Status     string        `json:"status"`
	HTTPStatus int           `json:"httpStatus,omitempty"`
	Error      string        `json:"error,omitempty"`
	TraceID    string        `json:"traceId,omitempty"`
	// ColdStart: the invocation waited for an instance to start.
	ColdStart bool `json:"coldStart,omitempty"`
	// Revision is the function's revision that served it ("" when not known).
	Revision string `json:"revision,omitempty"`
	// TTFB is how long an HTTP invocation waited for the function's answer to begin, Bytes
	// the bytes of the answer's body sent on, and Streamed whether the answer had no length
	// (chunked, SSE) or was an upgrade; counted as it passed, never buffered.
	TTFB     time.Duration `json:"ttfbNs,omitempty"`
	Bytes    int64         `json:"bytes,omitempty"`
	Streamed bool          `json:"streamed,omitempty"`
	// MemoryMB is the memory of the function's instances, what its GB-seconds are counted
	// by; the stores count it into the usage rollups and keep no column of it.
	MemoryMB int32 `json:"memoryMb,omitempty"`
}

// HTTPClientClosed is the status recorded for a caller that disconnected (nginx's 499).
const HTTPClientClosed = 499

// HTTPRecord is the record of an HTTP invocation answered with code: 504 is a timeout, 499
// and 5xx are failures.
func HTTPRecord(ns, fn string, start time.Time, d time.Duration, code int, traceID string) Record {
	rec := Record{Namespace: ns, Function: fn, Kind: KindHTTP, Start: start, Duration: d,
		HTTPStatus: code, Status: StatusSucceeded, TraceID: traceID}
	switch {
	case code == http.StatusGatewayTimeout:
		rec.Status, rec.Error = StatusTimeout, "timeout"
	case code == HTTPClientClosed:
		rec.Status, rec.Error = StatusFailed, "client closed the request"
	case code >= 500:
		rec.Status, rec.Error = StatusFailed, http.StatusText(code)
	}
	return rec
}

// Recorder stores invocation records. Record must return at once and never fail the caller's
// invocation; stores drop (and count) what they cannot keep.
type Recorder interface {
	Record(Record)
}

// Reader reads stored invocations of one namespace back: List pages through them, newest
// first; Stats counts them per bucket of a window, with duration percentiles, so a chart
// needs one read rather than every record.
type Reader interface {
	List(ctx context.Context, q Query) (Page, error)
	Stats(ctx context.Context, q StatsQuery) (Stats, error)
	// RevisionOutcomes counts, for a rollout's gate, the invocations a revision of a function
	// started since a time that are the function's own outcomes and how many of them failed
	// (Count and Errors of the Summary), as rules.RolloutOutcome judges each by its HTTP
	// status: a caller that went away, a body that did not arrive and every 4xx count for
	// nothing.
	RevisionOutcomes(ctx context.Context, ns, function, revision string, since time.Time) (Summary, error)
	// Usage reads a namespace's usage from the hourly rollups written with the records,
	// which outlive them.
	Usage(ctx context.Context, q UsageQuery) (UsageReport, error)
}

// addOutcomes adds n calls answered with httpStatus to s as a rollout counts them.
func (s *Summary) addOutcomes(httpStatus int, n int64) {
	switch rules.RolloutOutcome(httpStatus) {
	case rules.OutcomeFailed:
		s.Count += n
		s.Errors += n
	case rules.OutcomeSucceeded:
		s.Count += n
	case rules.OutcomeIgnored:
	}
}

// Query selects one page. Function is optional; Before is the Next cursor of the previous page
// ("" = newest); Limit 0 means DefaultLimit.
type Query struct {
	Namespace string
	Function  string
	Limit     int
	Before    string
}

// Page is one page of records, newest first; Next is "" on the last page.
type Page struct {
	Records []Record `json:"records"`
	Next    string   `json:"next,omitempty"`
}

const (
	DefaultLimit = 50
	MaxLimit     = 500
	// maxErrorLen caps the stored error text: a function may return a huge error body.
	maxErrorLen = 4096
)

// UnavailableError is a read that failed because the store could not be reached (the
// database is down); the gateway answers 503 and the caller may retry.
type UnavailableError struct{ Err error }

func (e *UnavailableError) Error() string { return "invocation history unavailable: " + e.Err.Error() }
func (e *UnavailableError) Unwrap() error { return e.Err }

// QueryError reports an invalid Query field; the gateway maps it to a 400 naming Field.
type QueryError struct {
	Field  string
	Reason string
}

func (e *QueryError) Error() string { return fmt.Sprintf("invalid %s: %s", e.Field, e.Reason) }

// ErrClosed is returned by List and Stats after Close.
var ErrClosed = errors.New("history store is closed")

// normalize validates q and resolves its defaults and cursor.
func (q Query) normalize() (Query, cursor, error) {
	if q.Namespace == "" {
		return q, cursor{}, &QueryError{Field: "namespace", Reason: "must not be empty"}
	}
	switch {
	case q.Limit < 0:
		return q, cursor{}, &QueryError{Field: "limit", Reason: fmt.Sprintf("%d is negative; use 1-%d or 0 for the default", q.Limit, MaxLimit)}
	case q.Limit == 0:
		q.Limit = DefaultLimit
	case q.Limit > MaxLimit:
		q.Limit = MaxLimit
	}
	c, err := parseCursor(q.Before)
	if err != nil {
		return q, cursor{}, err
	}
	return q, c, nil
}

// sanitize makes r storable as PostgreSQL text and bounded in size, and truncates Start to the
// microsecond precision of timestamptz so cursors compare equal in both stores.
func sanitize(r Record) Record {
	r.Start = r.Start.UTC().Truncate(time.Microsecond)
	r.Namespace = cleanText(r.Namespace, 253)
	r.Function = cleanText(r.Function, 253)
	r.Trigger = cleanText(r.Trigger, 253)
	r.Kind = Kind(cleanText(string(r.Kind), 16))
	r.Status = cleanText(r.Status, 16)
	r.Error = cleanText(r.Error, maxErrorLen)
	r.TraceID = cleanText(r.TraceID, 64)
	r.Revision = cleanText(r.Revision, 253)
	return r
}

// RolloutJudge is what rules.NextRollout judges a function's rollout by: the outcomes r
// counted of its revision's calls. Without r (nil), or when r fails, the rollout holds;
// absent says why r is nil.
func RolloutJudge(ctx context.Context, r interface {
	RevisionOutcomes(ctx context.Context, ns, function, revision string, since time.Time) (Summary, error)
}, ns, function, absent string) func(revision string, since time.Time) (requests, errors int64, hold string) {
	return func(revision string, since time.Time) (int64, int64, string) {
		if r == nil {
			return 0, 0, absent
		}
		sum, err := r.RevisionOutcomes(ctx, ns, function, revision, since)
		if err != nil {
			return 0, 0, "the invocation history is unavailable: " + err.Error()
		}
		return sum.Count, sum.Errors, ""
	}
}
