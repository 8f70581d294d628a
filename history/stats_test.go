package history

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseWindow(t *testing.T) {
	cases := map[string]struct {
		in      string
		want    string
		buckets int
		err     bool
	}{
		"default":     {"", "1h", 60, false},
		"hour":        {"1h", "1h", 60, false},
		"day":         {"24h", "24h", 96, false},
		"week":        {"7d", "", 0, true},
		"upper case":  {"1H", "", 0, true},
		"in minutes":  {"60m", "", 0, true},
		"a number":    {"3600", "", 0, true},
		"with spaces": {" 1h", "", 0, true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			w, err := ParseWindow(tc.in)
			if tc.err {
				var qe *QueryError
				if !errors.As(err, &qe) || qe.Field != "window" || !strings.Contains(err.Error(), "use 1h or 24h") || !strings.Contains(err.Error(), tc.in) {
					t.Fatalf("ParseWindow(%q) = %+v, %v; want a QueryError on window naming it and 1h or 24h", tc.in, w, err)
				}
				return
			}
			if err != nil || w.Name != tc.want || w.Buckets() != tc.buckets || w.Span%w.Bucket != 0 || (24*time.Hour)%w.Bucket != 0 {
				t.Fatalf("ParseWindow(%q) = %+v (%d buckets), %v; want %s with %d", tc.in, w, w.Buckets(), err, tc.want, tc.buckets)
			}
		})
	}
}

func TestPercentileCont(t *testing.T) {
	cases := map[string]struct {
		values []float64
		p      float64
		want   float64
	}{
		"one value":         {[]float64{7}, 0.95, 7},
		"median of even":    {[]float64{1, 2, 3, 4}, 0.5, 2.5},
		"median of odd":     {[]float64{1, 2, 9}, 0.5, 2},
		"p95 interpolated":  {[]float64{1, 2, 3, 4}, 0.95, 3.85},
		"p95 of ten":        {[]float64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}, 0.95, 95.5},
		"equal values":      {[]float64{5, 5, 5}, 0.95, 5},
		"first and last":    {[]float64{1, 100}, 0.5, 50.5},
		"zero is the first": {[]float64{3, 8}, 0, 3},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := percentileCont(tc.values, tc.p); got < tc.want-1e-9 || got > tc.want+1e-9 {
				t.Fatalf("percentileCont(%v, %v) = %v, want %v", tc.values, tc.p, got, tc.want)
			}
		})
	}
}

// TestStatsContract runs the same window over both stores: the buckets' bounds (the first
// included, the end excluded), counts, errors and percentiles, other functions and
// namespaces left out.
func TestStatsContract(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 30, 20, 0, time.UTC)
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	rec := func(fn string, at time.Time, d time.Duration, status string) Record {
		return Record{Namespace: "ns", Function: fn, Kind: KindHTTP, Start: at, Duration: d, Status: status}
	}
	var records []Record
	for i, d := range []float64{1, 2, 3, 4} { // 10:30, the current minute: one failure
		status := StatusSucceeded
		if i == 3 {
			status = StatusFailed
		}
		records = append(records, rec("a", now.Add(-time.Duration(i)*time.Second), ms(d), status))
	}
	for i := range 10 { // 10:00: 10 … 100 ms, two timeouts
		status := StatusSucceeded
		if i >= 8 {
			status = StatusTimeout
		}
		records = append(records, rec("a", time.Date(2026, 11, 29, 10, 0, i, 0, time.UTC), ms(float64(10*(i+1))), status))
	}
	hourStart := time.Date(2026, 11, 29, 9, 31, 0, 0, time.UTC)
	records = append(records,
		rec("a", hourStart, ms(7), StatusSucceeded),                                 // the first bucket of the hour
		rec("a", hourStart.Add(-time.Microsecond), ms(1), StatusSucceeded),          // before the hour; in the day
		rec("a", time.Date(2026, 11, 29, 10, 31, 0, 0, time.UTC), ms(1), "ok"),      // the hour's end; in the day's last bucket
		rec("a", now.Add(-25*time.Hour), ms(1), StatusSucceeded),                    // before the day
		rec("b", now, ms(1), StatusFailed),                                          // another function
		Record{Namespace: "other", Function: "a", Start: now, Status: StatusFailed}, // another namespace
	)
	type want struct {
		start        time.Time
		count, errs  int64
		p50ms, p95ms float64
	}
	check := func(t *testing.T, what string, got Summary, w want) {
		t.Helper()
		near := func(d time.Duration, ms float64) bool {
			diff := d - time.Duration(ms*float64(time.Millisecond))
			return diff > -time.Microsecond && diff < time.Microsecond
		}
		if got.Count != w.count || got.Errors != w.errs || !near(got.P50, w.p50ms) || !near(got.P95, w.p95ms) {
			t.Errorf("%s: %+v, want count %d errors %d p50 %vms p95 %vms", what, got, w.count, w.errs, w.p50ms, w.p95ms)
		}
	}
	for name, open := range contractStores(uint64(len(records))) {
		t.Run(name, func(t *testing.T) {
			recorder, rd, settle := open(t)
			for _, r := range records {
				recorder.Record(r)
			}
			settle()
			ctx := context.Background()

			hour, err := rd.Stats(ctx, StatsQuery{Namespace: "ns", Function: "a", Window: Windows[0], Now: now})
			if err != nil {
				t.Fatal(err)
			}
			if len(hour.Buckets) != 60 || !hour.Start.Equal(hourStart) || !hour.End.Equal(hourStart.Add(time.Hour)) {
				t.Fatalf("hour: %d buckets from %s to %s", len(hour.Buckets), hour.Start, hour.End)
			}
			wantHour := map[int]want{
				0:  {hourStart, 1, 0, 7, 7},
				29: {time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC), 10, 2, 55, 95.5},
				59: {time.Date(2026, 11, 29, 10, 30, 0, 0, time.UTC), 4, 1, 2.5, 3.85},
			}
			for i, b := range hour.Buckets {
				if !b.Start.Equal(hourStart.Add(time.Duration(i) * time.Minute)) {
					t.Fatalf("hour bucket %d starts at %s", i, b.Start)
				}
				check(t, "hour bucket "+b.Start.Format("15:04"), b.Summary, wantHour[i])
			}
			check(t, "hour total", hour.Total, want{count: 15, errs: 3, p50ms: 30, p95ms: 93})

			day, err := rd.Stats(ctx, StatsQuery{Namespace: "ns", Function: "a", Window: Windows[1], Now: now})
			if err != nil {
				t.Fatal(err)
			}
			dayEnd := time.Date(2026, 11, 29, 10, 45, 0, 0, time.UTC)
			if len(day.Buckets) != 96 || !day.End.Equal(dayEnd) || !day.Start.Equal(dayEnd.Add(-24*time.Hour)) {
				t.Fatalf("day: %d buckets from %s to %s", len(day.Buckets), day.Start, day.End)
			}
			wantDay := map[int]want{
				91: {count: 2, errs: 0, p50ms: 4, p95ms: 6.7},    // 09:30: 1 ms and 7 ms
				93: {count: 10, errs: 2, p50ms: 55, p95ms: 95.5}, // 10:00
				95: {count: 5, errs: 2, p50ms: 2, p95ms: 3.8},    // 10:30: 1, 1, 2, 3, 4 ms; "ok" is no success
			}
			for i, b := range day.Buckets {
				check(t, "day bucket "+b.Start.Format("15:04"), b.Summary, wantDay[i])
			}
			if day.Total.Count != 17 || day.Total.Errors != 4 {
				t.Errorf("day total %+v, want 17 invocations, 4 errors", day.Total)
			}

			all, err := rd.Stats(ctx, StatsQuery{Namespace: "ns", Window: Windows[0], Now: now})
			if err != nil || all.Total.Count != 16 || all.Buckets[59].Count != 5 {
				t.Fatalf("namespace-wide stats: total %+v, last bucket %+v, %v; want function b counted too", all.Total, all.Buckets[59], err)
			}
			empty, err := rd.Stats(ctx, StatsQuery{Namespace: "nobody", Window: Windows[1], Now: now})
			if err != nil || len(empty.Buckets) != 96 || empty.Total != (Summary{}) {
				t.Fatalf("empty namespace: %+v, %v", empty.Total, err)
			}
			if _, err := rd.Stats(ctx, StatsQuery{Function: "a", Window: Windows[0]}); err == nil {
				t.Fatal("stats without a namespace did not fail")
			}
		})
	}
}
