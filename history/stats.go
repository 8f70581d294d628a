package history

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Window is the span a stats read covers, cut into buckets of equal width.
type Window struct {
	Name   string        // as the API takes it: "1h", "24h"
	Span   time.Duration // how far back the window reaches
	Bucket time.Duration // width of one bucket; divides Span and a day
}

// Buckets is the number of buckets of the window.
func (w Window) Buckets() int { return int(w.Span / w.Bucket) }

// Windows are the stats windows offered: the last hour by minute, the last day by quarter
// hour (96 buckets: a chart stays readable and a day's query sorts a quarter hour at a time).
var Windows = []Window{
	{Name: "1h", Span: time.Hour, Bucket: time.Minute},
	{Name: "24h", Span: 24 * time.Hour, Bucket: 15 * time.Minute},
}

// DefaultWindow is the window of a stats read that names none.
var DefaultWindow = Windows[0]

// ParseWindow reads the ?window= of a stats read ("" is DefaultWindow).
func ParseWindow(s string) (Window, error) {
	if s == "" {
		return DefaultWindow, nil
	}
	names := make([]string, len(Windows))
	for i, w := range Windows {
		if w.Name == s {
			return w, nil
		}
		names[i] = w.Name
	}
	return Window{}, &QueryError{Field: "window", Reason: fmt.Sprintf("%q is not a stats window; use %s", s, strings.Join(names, " or "))}
}

// StatsQuery selects the invocations a stats read summarizes: one namespace (and Function if
// set) within Window ending at Now (zero: the current time).
type StatsQuery struct {
	Namespace string
	Function  string
	Window    Window
	Now       time.Time
}

// Summary counts invocations and their duration percentiles (linear interpolation between
// the closest ranks, PostgreSQL's percentile_cont). Errors are the ones that did not
// succeed (failed or timed out). P50 and P95 are zero when Count is.
type Summary struct {
	Count    int64
	Errors   int64
	P50, P95 time.Duration
}

// Bucket is the Summary of the invocations started in [Start, Start+Window.Bucket).
type Bucket struct {
	Start time.Time
	Summary
}

// Stats is a window's summary and its buckets, oldest first, every bucket present (empty
// ones have Count 0). The last bucket holds the current one, so it is still filling.
type Stats struct {
	Window     Window
	Start, End time.Time
	Total      Summary
	Buckets    []Bucket
}

// bounds validates q and resolves the window's [start, end): buckets are aligned to their
// width in UTC and end with the one holding q.Now.
func (q StatsQuery) bounds() (StatsQuery, time.Time, time.Time, error) {
	if q.Namespace == "" {
		return q, time.Time{}, time.Time{}, &QueryError{Field: "namespace", Reason: "must not be empty"}
	}
	if q.Window.Bucket <= 0 || q.Window.Span < q.Window.Bucket {
		q.Window = DefaultWindow
	}
	if q.Now.IsZero() {
		q.Now = time.Now()
	}
	end := q.Now.UTC().Truncate(q.Window.Bucket).Add(q.Window.Bucket)
	return q, end.Add(-q.Window.Span), end, nil
}

// newStats lays out the empty buckets of [start, end).
func newStats(w Window, start, end time.Time) Stats {
	s := Stats{Window: w, Start: start, End: end, Buckets: make([]Bucket, w.Buckets())}
	for i := range s.Buckets {
		s.Buckets[i].Start = start.Add(time.Duration(i) * w.Bucket)
	}
	return s
}

// bucketOf is the index of the bucket t falls in, or -1 outside the window.
func (s *Stats) bucketOf(t time.Time) int {
	if t.Before(s.Start) || !t.Before(s.End) {
		return -1
	}
	return int(t.Sub(s.Start) / s.Window.Bucket)
}

// summarize computes a Summary from the durations (in microseconds, as PostgreSQL stores
// them) and the error count of a group.
func summarize(micros []float64, errors int64) Summary {
	s := Summary{Count: int64(len(micros)), Errors: errors}
	if len(micros) == 0 {
		return s
	}
	slices.Sort(micros)
	s.P50, s.P95 = fromMicros(percentileCont(micros, 0.5)), fromMicros(percentileCont(micros, 0.95))
	return s
}

// percentileCont is PostgreSQL's percentile_cont over sorted values: the value at fraction
// p of the way from the first to the last, interpolated between its two neighbours the way
// float8_lerp does, so both stores give the same figure.
func percentileCont(sorted []float64, p float64) float64 {
	pos := p * float64(len(sorted)-1)
	lo, hi := math.Floor(pos), math.Ceil(pos)
	a, b := sorted[int(lo)], sorted[int(hi)]
	if lo == hi {
		return a
	}
	return a + (pos-lo)*(b-a)
}

func fromMicros(us float64) time.Duration { return time.Duration(math.Round(us * 1e3)) }
