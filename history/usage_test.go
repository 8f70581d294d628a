package history

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"sless.dev/sless/test/testkit"
)

// usageReplay is a known set of invocations: two tenants, three functions, calls, cold
// starts, failures and timeouts over four hours that cross a UTC day, with durations that
// bill whole, rounded-up and zero milliseconds, and one function of unknown memory.
func usageReplay() []Record {
	day := time.Date(2026, 3, 1, 22, 0, 0, 0, time.UTC)
	at := func(h, m int) time.Time { return day.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute) }
	us := func(n int64) time.Duration { return time.Duration(n) * time.Microsecond }
	return []Record{
		{Namespace: "acme", Function: "a", Kind: KindHTTP, Start: at(0, 1), Duration: us(1500), Status: StatusSucceeded, MemoryMB: 128, Bytes: 100, ColdStart: true},
		{Namespace: "acme", Function: "a", Kind: KindHTTP, Start: at(0, 59), Duration: us(999), Status: StatusSucceeded, MemoryMB: 128, Bytes: 50},
		{Namespace: "acme", Function: "a", Kind: KindHTTP, Start: at(1, 0), Duration: us(2000), Status: StatusFailed, MemoryMB: 128, Bytes: 10},
		{Namespace: "acme", Function: "a", Kind: KindAsync, Start: at(2, 30), Duration: 30 * time.Second, Status: StatusTimeout, MemoryMB: 128},
		{Namespace: "acme", Function: "b", Kind: KindEvent, Start: at(0, 10), Duration: 250*time.Millisecond + 1, Status: StatusSucceeded, MemoryMB: 1024, ColdStart: true},
		{Namespace: "acme", Function: "b", Kind: KindCron, Start: at(3, 0), Duration: 0, Status: StatusSucceeded, MemoryMB: 1024},
		{Namespace: "acme", Function: "b", Kind: KindJob, Start: at(3, 59), Duration: us(12345678), Status: StatusFailed, MemoryMB: 1024, ColdStart: true},
		{Namespace: "acme", Function: "c", Kind: KindHTTP, Start: at(1, 30), Duration: us(700), Status: StatusSucceeded, Bytes: 1 << 20},
		{Namespace: "globex", Function: "a", Kind: KindHTTP, Start: at(0, 5), Duration: time.Second, Status: StatusSucceeded, MemoryMB: 512, Bytes: 7, ColdStart: true},
		{Namespace: "globex", Function: "a", Kind: KindHTTP, Start: at(1, 5), Duration: us(1), Status: StatusFailed, MemoryMB: 512},
		{Namespace: "globex", Function: "z", Kind: KindEvent, Start: at(2, 5), Duration: time.Millisecond, Status: StatusTimeout, MemoryMB: 256},
	}
}

// wantUsage sums records as the figures are defined, record by record.
func wantUsage(records []Record) (u Usage, gbSeconds float64) {
	for _, r := range records {
		u.Invocations++
		if r.Status == StatusFailed || r.Status == StatusTimeout {
			u.Errors++
		}
		if r.ColdStart {
			u.ColdStarts++
		}
		u.DurationUS += r.Duration.Microseconds()
		billed := int64(math.Ceil(float64(r.Duration) / float64(time.Millisecond)))
		u.MBMillis += int64(r.MemoryMB) * billed
		gbSeconds += float64(r.MemoryMB) / 1024 * float64(billed) / 1000
		u.BytesOut += r.Bytes
	}
	return u, gbSeconds
}

// TestUsageIsExact replays usageReplay into each store (PostgreSQL in batches of three, so
// rollups of one hour are added up across batches) and checks every column of every
// grouping against the sum over the records, then prunes the history and checks again.
func TestUsageIsExact(t *testing.T) {
	records := usageReplay()
	stores := map[string]func(t *testing.T) (Recorder, Reader, func(), func()){
		// A ring of 4 prunes most records while they are replayed.
		"memory": func(*testing.T) (Recorder, Reader, func(), func()) {
			m := NewMemory(4)
			return m, m, func() {}, func() {}
		},
		"postgres": func(t *testing.T) (Recorder, Reader, func(), func()) {
			dsn := newDatabase(t)
			p := openTestStore(t, dsn, PostgresOptions{BatchSize: 3, FlushInterval: 10 * time.Millisecond})
			settle := func() {
				testkit.WaitFor(t, "records written", 10*time.Second, func() bool { return p.Written() == uint64(len(records)) })
			}
			prune := func() {
				c, err := pgx.Connect(context.Background(), dsn)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close(context.Background())
				if _, err := c.Exec(context.Background(), "DELETE FROM invocations"); err != nil {
					t.Fatal(err)
				}
			}
			return p, p, settle, prune
		},
	}
	from, to := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 3, 0, 0, 0, 0, time.UTC)
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			rec, rd, settle, prune := open(t)
			for _, r := range records {
				rec.Record(r)
			}
			settle()
			check := func(t *testing.T) {
				for _, ns := range []string{"acme", "globex"} {
					for _, by := range UsageBys {
						got, err := rd.Usage(context.Background(), UsageQuery{Namespace: ns, From: from, To: to, By: by})
						if err != nil {
							t.Fatal(err)
						}
						groups := map[UsageRow][]Record{}
						var all []Record
						for _, r := range records {
							if r.Namespace == ns {
								g := by.group(r.Function, r.Start.Truncate(time.Hour))
								groups[g] = append(groups[g], r)
								all = append(all, r)
							}
						}
						if len(got.Rows) != len(groups) {
							t.Fatalf("%s by %s: %d rows, want %d: %+v", ns, by, len(got.Rows), len(groups), got.Rows)
						}
						for _, row := range got.Rows {
							key := row
							key.Usage = Usage{}
							want, gb := wantUsage(groups[key])
							if row.Usage != want || math.Abs(row.GBSeconds()-gb) > 1e-9 {
								t.Errorf("%s by %s, row %v %q: %+v (%g GB-s), want %+v (%g GB-s)", ns, by, row.Start, row.Function, row.Usage, row.GBSeconds(), want, gb)
							}
						}
						want, _ := wantUsage(all)
						if got.Total != want || !got.From.Equal(from) || !got.To.Equal(to) || got.By != by {
							t.Errorf("%s by %s: total %+v of %v-%v, want %+v", ns, by, got.Total, got.From, got.To, want)
						}
					}
				}
			}
			check(t)
			prune()
			if page, err := rd.List(context.Background(), Query{Namespace: "acme", Limit: MaxLimit}); err != nil || len(page.Records) >= len(records) {
				t.Fatalf("history not pruned: %d records, %v", len(page.Records), err)
			}
			check(t)
		})
	}
}

func TestUsageQueryBounds(t *testing.T) {
	now := time.Date(2026, 3, 1, 10, 20, 0, 0, time.UTC)
	cases := map[string]struct {
		q              UsageQuery
		from, to       time.Time
		field, message string
	}{
		"default: the last day in whole hours": {q: UsageQuery{}, from: time.Date(2026, 2, 28, 10, 0, 0, 0, time.UTC), to: time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC)},
		"hours rounded out":                    {q: UsageQuery{From: now.Add(-90 * time.Minute), To: now}, from: time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC), to: time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC)},
		"31 days by hour":                      {q: UsageQuery{From: now.Add(-31 * 24 * time.Hour), To: now.Truncate(time.Hour)}, from: now.Truncate(time.Hour).Add(-31 * 24 * time.Hour), to: now.Truncate(time.Hour)},
		"32 days by hour":                      {q: UsageQuery{From: now.Add(-32 * 24 * time.Hour)}, field: "from", message: "longer than the 31 days a read by hour may cover; narrow it or group by day"},
		"32 days by day":                       {q: UsageQuery{From: now.Add(-32 * 24 * time.Hour), By: UsageByDay}, from: now.Truncate(time.Hour).Add(-32 * 24 * time.Hour), to: now.Truncate(time.Hour).Add(time.Hour)},
		"two years by function":                {q: UsageQuery{From: now.Add(-2 * 366 * 24 * time.Hour), By: UsageByFunction}, field: "from", message: "longer than the 366 days"},
		"to before from":                       {q: UsageQuery{From: now, To: now.Add(-2 * time.Hour)}, field: "to", message: "is not after from"},
		"unknown grouping":                     {q: UsageQuery{By: "week"}, field: "by", message: `"week" is not a grouping; use hour, day, function`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tc.q.Namespace, tc.q.Now = "ns", now
			got, err := tc.q.bounds()
			if tc.field != "" {
				var qe *QueryError
				if !errors.As(err, &qe) || qe.Field != tc.field || !strings.Contains(err.Error(), tc.message) {
					t.Fatalf("bounds() = %v; want a QueryError on %s saying %q", err, tc.field, tc.message)
				}
				return
			}
			if err != nil || !got.From.Equal(tc.from) || !got.To.Equal(tc.to) {
				t.Fatalf("bounds() = %v to %v, %v; want %v to %v", got.From, got.To, err, tc.from, tc.to)
			}
		})
	}
}
