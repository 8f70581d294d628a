package history

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Usage is what a set of invocations used, the figures an operator bills from. Every field
// is an integer sum, so rollups added up in any order give the same figures as the records.
type Usage struct {
	Invocations int64
	// Errors are the invocations that did not succeed (failed or timed out).
	Errors     int64
	ColdStarts int64
	// DurationUS is the sum of the invocations' durations in microseconds (as the history
	// keeps them).
	DurationUS int64
	// MBMillis is the sum of memory_mb × billed milliseconds (BilledMillis).
	MBMillis int64
	// BytesOut is the sum of the bytes of the answers sent on (Record.Bytes).
	BytesOut int64
}

// BilledMillis is the duration an invocation is billed for: d rounded up to the next whole
// millisecond.
func BilledMillis(d time.Duration) int64 {
	return int64((max(d, 0) + time.Millisecond - 1) / time.Millisecond)
}

// usageOf is what r used.
func usageOf(r Record) Usage {
	u := Usage{Invocations: 1, DurationUS: r.Duration.Microseconds(), MBMillis: int64(r.MemoryMB) * BilledMillis(r.Duration), BytesOut: r.Bytes}
	if r.Status != StatusSucceeded {
		u.Errors = 1
	}
	if r.ColdStart {
		u.ColdStarts = 1
	}
	return u
}

// Add adds o to u.
func (u *Usage) Add(o Usage) {
	u.Invocations += o.Invocations
	u.Errors += o.Errors
	u.ColdStarts += o.ColdStarts
	u.DurationUS += o.DurationUS
	u.MBMillis += o.MBMillis
	u.BytesOut += o.BytesOut
}

// GBSeconds is MBMillis in GB-seconds: memory_mb / 1024 × billed seconds.
func (u Usage) GBSeconds() float64 { return float64(u.MBMillis) / 1024 / 1000 }

// usageKey is one rollup: a function of a namespace in one UTC hour (Unix seconds).
type usageKey struct {
	namespace, function string
	hour                int64
}

func usageKeyOf(r Record) usageKey {
	return usageKey{r.Namespace, r.Function, r.Start.Truncate(time.Hour).Unix()}
}

// rollup adds the records of a batch up per namespace, function and UTC hour, so a store
// writes one rollup per key and batch. Records must be sanitized.
func rollup(records []Record) map[usageKey]Usage {
	out := make(map[usageKey]Usage)
	for _, r := range records {
		k := usageKeyOf(r)
		u := out[k]
		u.Add(usageOf(r))
		out[k] = u
	}
	return out
}

// sortedKeys orders a batch's rollups so that every writer takes the rows' locks in the same
// order (concurrent writers then never deadlock).
func sortedKeys(m map[usageKey]Usage) []usageKey {
	keys := make([]usageKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b usageKey) int {
		return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.function, b.function), cmp.Compare(a.hour, b.hour))
	})
	return keys
}

// UsageBy is how a usage read groups its rows.
type UsageBy string

const (
	UsageByHour     UsageBy = "hour"
	UsageByDay      UsageBy = "day" // UTC days
	UsageByFunction UsageBy = "function"
)

// UsageBys are the groupings offered; the first is the default.
var UsageBys = []UsageBy{UsageByHour, UsageByDay, UsageByFunction}

// Spans of a usage read: at most MaxUsageHourSpan by hour (744 rows), MaxUsageSpan otherwise;
// DefaultUsageSpan when the read names no start.
const (
	MaxUsageHourSpan = 31 * 24 * time.Hour
	MaxUsageSpan     = 366 * 24 * time.Hour
	DefaultUsageSpan = 24 * time.Hour
)

// ParseUsageBy reads the ?by= of a usage read ("" is hour).
func ParseUsageBy(s string) (UsageBy, error) {
	if s == "" {
		return UsageBys[0], nil
	}
	names := make([]string, len(UsageBys))
	for i, b := range UsageBys {
		if string(b) == s {
			return b, nil
		}
		names[i] = string(b)
	}
	return "", &QueryError{Field: "by", Reason: fmt.Sprintf("%q is not a grouping; use %s", s, strings.Join(names, ", "))}
}

// UsageQuery selects the usage of one namespace over [From, To) grouped By. Zero To is the
// current time, zero From DefaultUsageSpan before To.
type UsageQuery struct {
	Namespace string
	From, To  time.Time
	By        UsageBy
	Now       time.Time // zero: the current time
}

// UsageRow is the usage of one group: Start is the hour's or the day's start (by hour or
// day), Function the function's name (by function).
type UsageRow struct {
	Start    time.Time
	Function string
	Usage
}

// UsageReport is the usage of a window, the groups that used anything in order (oldest or
// by name) and their sum.
type UsageReport struct {
	From, To time.Time
	By       UsageBy
	Rows     []UsageRow
	Total    Usage
}

// bounds validates q and resolves its window to whole UTC hours, the rollups' grain: From
// rounded down, To rounded up.
func (q UsageQuery) bounds() (UsageQuery, error) {
	if q.Namespace == "" {
		return q, &QueryError{Field: "namespace", Reason: "must not be empty"}
	}
	by, err := ParseUsageBy(string(q.By))
	if err != nil {
		return q, err
	}
	q.By = by
	if q.Now.IsZero() {
		q.Now = time.Now()
	}
	if q.To.IsZero() {
		q.To = q.Now
	}
	if q.From.IsZero() {
		q.From = q.To.Add(-DefaultUsageSpan)
	}
	q.From = q.From.UTC().Truncate(time.Hour)
	if to := q.To.UTC().Truncate(time.Hour); to.Equal(q.To) {
		q.To = to
	} else {
		q.To = to.Add(time.Hour)
	}
	span, limit, instead := q.To.Sub(q.From), MaxUsageSpan, ""
	if q.By == UsageByHour {
		limit, instead = MaxUsageHourSpan, " or group by "+string(UsageByDay)
	}
	switch {
	case span <= 0:
		return q, &QueryError{Field: "to", Reason: fmt.Sprintf("%s is not after from (%s)", q.To.Format(time.RFC3339), q.From.Format(time.RFC3339))}
	case span > limit:
		return q, &QueryError{Field: "from", Reason: fmt.Sprintf("the window %s to %s is longer than the %d days a read by %s may cover; narrow it%s",
			q.From.Format(time.RFC3339), q.To.Format(time.RFC3339), limit/(24*time.Hour), q.By, instead)}
	}
	return q, nil
}

// group is the row a rollup of function in the hour starting at hour falls in.
func (b UsageBy) group(function string, hour time.Time) UsageRow {
	switch b {
	case UsageByFunction:
		return UsageRow{Function: function}
	case UsageByDay:
		return UsageRow{Start: hour.Truncate(24 * time.Hour)}
	}
	return UsageRow{Start: hour}
}

// report orders rows (one per group) and sums them into a report of q.
func (q UsageQuery) report(rows []UsageRow) UsageReport {
	slices.SortFunc(rows, func(a, b UsageRow) int {
		return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.Function, b.Function))
	})
	r := UsageReport{From: q.From, To: q.To, By: q.By, Rows: rows}
	if r.Rows == nil {
		r.Rows = []UsageRow{}
	}
	for _, row := range rows {
		r.Total.Add(row.Usage)
	}
	return r
}
