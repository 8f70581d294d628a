package history

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"sless.dev/sless/test/testkit"
)

// contractStores opens a fresh store of each kind for a test run against both: it returns the
// store's writer, its reader and settle, which waits until written records are stored.
func contractStores(written uint64) map[string]func(t *testing.T) (Recorder, Reader, func()) {
	return map[string]func(t *testing.T) (Recorder, Reader, func()){
		"memory": func(*testing.T) (Recorder, Reader, func()) {
			m := NewMemory(0)
			return m, m, func() {}
		},
		"postgres": func(t *testing.T) (Recorder, Reader, func()) {
			p := openTestStore(t, newDatabase(t), PostgresOptions{FlushInterval: 10 * time.Millisecond})
			return p, p, func() {
				testkit.WaitFor(t, "records written", 10*time.Second, func() bool { return p.Written() == written })
			}
		},
	}
}

// TestListContract runs the same pagination cases against both stores.
func TestListContract(t *testing.T) {
	for name, open := range contractStores(27) {
		t.Run(name, func(t *testing.T) {
			rec, rd, settle := open(t)
			base := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
			// 25 records of "a" in ns, three of them sharing one start (ties broken by id),
			// plus noise in another function and another namespace.
			for i := range 25 {
				start := base.Add(time.Duration(i) * time.Second)
				if i >= 10 && i < 13 {
					start = base.Add(10 * time.Second)
				}
				rec.Record(Record{Namespace: "ns", Function: "a", Kind: KindCron, Start: start, Status: StatusSucceeded,
					Duration: 1500 * time.Microsecond, HTTPStatus: 200, TraceID: fmt.Sprint(i)})
			}
			rec.Record(Record{Namespace: "ns", Function: "b", Kind: KindHTTP, Start: base, Status: StatusFailed})
			rec.Record(Record{Namespace: "other", Function: "a", Kind: KindHTTP, Start: base, Status: StatusFailed})
			settle()

			cases := []struct {
				name     string
				q        Query
				want     int
				pageSize int
			}{
				{"function pages of 10", Query{Namespace: "ns", Function: "a", Limit: 10}, 25, 10},
				{"function pages of 1", Query{Namespace: "ns", Function: "a", Limit: 1}, 25, 1},
				{"namespace one page", Query{Namespace: "ns", Limit: 100}, 26, 100},
				{"namespace default limit", Query{Namespace: "ns"}, 26, DefaultLimit},
				{"empty namespace", Query{Namespace: "nobody"}, 0, DefaultLimit},
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					var all []Record
					q := tc.q
					for pages := 0; ; pages++ {
						pg, err := rd.List(context.Background(), q)
						if err != nil {
							t.Fatal(err)
						}
						if len(pg.Records) > tc.pageSize || pg.Records == nil {
							t.Fatalf("page has %d records (nil=%v), limit %d", len(pg.Records), pg.Records == nil, tc.pageSize)
						}
						all = append(all, pg.Records...)
						if pg.Next == "" {
							break
						}
						q.Before = pg.Next
					}
					if len(all) != tc.want {
						t.Fatalf("got %d records over all pages, want %d", len(all), tc.want)
					}
					seen := map[int64]bool{}
					for i, r := range all {
						if seen[r.ID] {
							t.Fatalf("record id %d returned twice", r.ID)
						}
						seen[r.ID] = true
						if i > 0 && (r.Start.After(all[i-1].Start) || r.Start.Equal(all[i-1].Start) && r.ID > all[i-1].ID) {
							t.Fatalf("records %d and %d not newest first", i-1, i)
						}
						if r.Namespace != tc.q.Namespace || tc.q.Function != "" && r.Function != tc.q.Function {
							t.Fatalf("record of %s/%s leaked into %+v", r.Namespace, r.Function, tc.q)
						}
					}
					if tc.want > 0 && tc.q.Function == "a" {
						newest := all[0]
						if newest.TraceID != "24" || newest.Kind != KindCron || newest.Duration != 1500*time.Microsecond || newest.HTTPStatus != 200 {
							t.Fatalf("newest record not round-tripped: %+v", newest)
						}
					}
				})
			}
		})
	}
}

func TestQueryErrors(t *testing.T) {
	m := NewMemory(0)
	cases := map[string]struct {
		q     Query
		field string
	}{
		"no namespace":   {Query{}, "namespace"},
		"negative limit": {Query{Namespace: "ns", Limit: -1}, "limit"},
		"garbage cursor": {Query{Namespace: "ns", Before: "%%%"}, "before"},
		"not a pair":     {Query{Namespace: "ns", Before: "MTIz"}, "before"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := m.List(context.Background(), tc.q)
			var qe *QueryError
			if !errors.As(err, &qe) || qe.Field != tc.field {
				t.Fatalf("err = %v, want QueryError on %s", err, tc.field)
			}
		})
	}
}

func TestMemoryEvictsOldest(t *testing.T) {
	m := NewMemory(3)
	base := time.Now()
	for i := range 5 {
		m.Record(Record{Namespace: "ns", Function: fmt.Sprint(i), Start: base.Add(time.Duration(i) * time.Second)})
	}
	pg, err := m.List(context.Background(), Query{Namespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range pg.Records {
		got = append(got, r.Function)
	}
	if fmt.Sprint(got) != "[4 3 2]" {
		t.Fatalf("kept %v, want the newest three [4 3 2]", got)
	}
}

func FuzzParseCursor(f *testing.F) {
	f.Add("")
	f.Add(cursorOf(Record{ID: 42, Start: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)}))
	f.Add("MTIz")
	f.Add("LTk5OTk5OTk5OTk5OTk5OTk5OS4x")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parseCursor(s)
		if err != nil {
			var qe *QueryError
			if !errors.As(err, &qe) {
				t.Fatalf("error %v is not a QueryError", err)
			}
			return
		}
		if s == "" {
			return
		}
		again, err := parseCursor(cursorOf(Record{ID: c.id, Start: c.start}))
		if err != nil || !again.start.Equal(c.start) || again.id != c.id {
			t.Fatalf("cursor %q does not round-trip: %v", s, err)
		}
	})
}

// TestPostgresAfterClose: a closed store's reads answer ErrClosed and Record counts a drop.
func TestPostgresAfterClose(t *testing.T) {
	p := openTestStore(t, newDatabase(t), PostgresOptions{})
	ctx := context.Background()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for what, read := range map[string]func() error{
		"List":  func() error { _, err := p.List(ctx, Query{Namespace: "ns"}); return err },
		"Stats": func() error { _, err := p.Stats(ctx, StatsQuery{Namespace: "ns"}); return err },
	} {
		if err := read(); !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", what, err)
		}
	}
	p.Record(Record{Namespace: "ns", Function: "f", Start: time.Now()})
	if p.Dropped() != 1 {
		t.Fatalf("Record after Close dropped %d, want 1 counted drop", p.Dropped())
	}
}

// TestRevisionOutcomesContract: both stores count one revision's calls since a time, and
// nothing of other revisions, functions or earlier calls; which calls count, and as what, is
// TestRolloutOutcomesBothStores's.
func TestRevisionOutcomesContract(t *testing.T) {
	for name, open := range contractStores(8) {
		t.Run(name, func(t *testing.T) {
			rec, rd, settle := open(t)
			base := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
			for i, code := range []int{200, 500, 504, 200} {
				r := HTTPRecord("ns", "f", base.Add(time.Duration(i)*time.Second), time.Millisecond, code, "")
				r.Revision = "f-2"
				rec.Record(r)
			}
			for _, r := range []Record{
				{Namespace: "ns", Function: "f", Revision: "f-2", Start: base.Add(-time.Second)},
				{Namespace: "ns", Function: "f", Revision: "f-1", Start: base},
				{Namespace: "ns", Function: "g", Revision: "f-2", Start: base},
				{Namespace: "other", Function: "f", Revision: "f-2", Start: base},
			} {
				r.Kind, r.Status, r.HTTPStatus = KindHTTP, StatusFailed, 500
				rec.Record(r)
			}
			settle()
			s, err := rd.RevisionOutcomes(context.Background(), "ns", "f", "f-2", base)
			if err != nil || s.Count != 4 || s.Errors != 2 {
				t.Fatalf("got %+v, %v; want 4 calls, 2 failed", s, err)
			}
		})
	}
}

// TestRecordRoundTrip: every field of a record comes back from both stores as written (the
// ID is the store's).
func TestRecordRoundTrip(t *testing.T) {
	for name, open := range contractStores(1) {
		t.Run(name, func(t *testing.T) {
			rec, rd, settle := open(t)
			want := Record{Namespace: "ns", Function: "f", Trigger: "web", Kind: KindHTTP,
				Start: time.Date(2026, 12, 6, 10, 0, 0, 123000, time.UTC), Duration: 2500 * time.Millisecond,
				Status: StatusFailed, HTTPStatus: 502, Error: "Bad Gateway", TraceID: "0af7651916cd43dd8448eb211c80319c",
				ColdStart: true, Revision: "f-3", TTFB: 40 * time.Millisecond, Bytes: 1 << 33, Streamed: true}
			rec.Record(want)
			settle()
			pg, err := rd.List(context.Background(), Query{Namespace: "ns"})
			if err != nil || len(pg.Records) != 1 {
				t.Fatalf("List = %+v, %v", pg, err)
			}
			got := pg.Records[0]
			got.ID = 0
			if got != want {
				t.Errorf("read back\n %+v\nwant\n %+v", got, want)
			}
		})
	}
}
