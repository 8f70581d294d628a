package cluster_test

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/gateway/backend/backendtest"
	"sless.dev/sless/gateway/client"
	"sless.dev/sless/history"
	"sless.dev/sless/test/pgtest"
	"sless.dev/sless/test/testkit"
)

func TestHistoryRecordsEveryInvocation(t *testing.T) {
	up := newUpstream(t)
	h := newHarness(t, harnessOptions{interceptor: up.URL})
	tn := h.tenant()
	fnURL := h.deploy(tn, "counted", 0)
	const n = 25
	for i := range n {
		path := "/echo"
		if i%5 == 0 {
			path = "/fail"
		}
		do(t, "GET", fnURL+path, "", "", nil)
	}
	testkit.WaitFor(t, "25 rows in PostgreSQL", 10*time.Second, func() bool { return pgtest.CountInvocations(t, h.dbURL, "WHERE namespace = $1", tn.ns) == n })

	// Read back through the API in pages of 10.
	var seen, failed int
	before := ""
	for page := 0; ; page++ {
		p, err := tn.c.ListInvocations(context.Background(), tn.ns, "counted", 10, before)
		if err != nil {
			t.Fatal(err)
		}
		for _, inv := range p.Invocations {
			seen++
			if inv.Kind != "http" || inv.Function != "counted" || len(inv.TraceID) != 32 || inv.DurationMs <= 0 {
				t.Fatalf("record %+v", inv)
			}
			if inv.HTTPStatus == 500 {
				failed++
				if inv.Status != "failed" {
					t.Fatalf("500 recorded as %q", inv.Status)
				}
			} else if inv.Status != "succeeded" || inv.HTTPStatus != 200 {
				t.Fatalf("record %+v", inv)
			}
		}
		if p.Next == "" {
			break
		}
		before = p.Next
		if page > 5 {
			t.Fatal("pagination does not end")
		}
	}
	if seen != n || failed != n/5 {
		t.Fatalf("read %d invocations (%d failed), want %d (%d failed)", seen, failed, n, n/5)
	}
	code, e, _ := do(t, "GET", h.URL+"/v1/namespaces/"+tn.ns+"/functions/counted/invocations?limit=abc", tn.token, "", nil)
	if code != 400 || e.Field != "limit" {
		t.Fatalf("bad limit: %d %+v", code, e)
	}
	code, e, _ = do(t, "GET", h.URL+"/v1/namespaces/"+tn.ns+"/functions/counted/invocations?before=garbage", tn.token, "", nil)
	if code != 400 || e.Field != "before" {
		t.Fatalf("bad cursor: %d %+v", code, e)
	}
}

// TestHistoryDatabaseOutage stops the database link mid-test: invocations keep answering 200,
// lost records are counted on /metrics, reading the history answers 503, and the writer
// reconnects when the link is back.
func TestHistoryDatabaseOutage(t *testing.T) {
	dbURL := newDatabase(t)
	link := testkit.NewLink(t, pgtest.Addr(t))
	up := newUpstream(t)
	h := newHarness(t, harnessOptions{interceptor: up.URL, historyDSN: pgtest.Via(t, dbURL, link.Addr())})
	tn := h.tenant()
	fnURL := h.deploy(tn, "resilient", 0)

	call := func(k int) {
		for range k {
			if code, _, _ := do(t, "GET", fnURL+"/echo", "", "", nil); code != 200 {
				t.Fatalf("invocation answered %d", code)
			}
		}
	}
	call(5)
	testkit.WaitFor(t, "the first 5 rows", 10*time.Second, func() bool { return pgtest.CountInvocations(t, dbURL, "WHERE namespace = $1", tn.ns) == 5 })

	link.Cut()
	start := time.Now()
	call(20)
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("20 invocations took %s with the database down: the history is on the request path", took)
	}
	testkit.WaitFor(t, "dropped records on /metrics", 30*time.Second, func() bool { return droppedMetric(t, h.URL) > 0 })
	// Reading the history while its database is down is a 503 to retry, not a 500.
	code, e, hdr := do(t, "GET", h.URL+"/v1/namespaces/"+tn.ns+"/functions/resilient/invocations", tn.token, "", nil)
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" || e.Error == "" {
		t.Fatalf("history read with the database down: %d %+v Retry-After %q; want 503 with a message and Retry-After", code, e, hdr.Get("Retry-After"))
	}

	link.Restore(t)
	call(5)
	testkit.WaitFor(t, "writes to resume after the database came back", 30*time.Second, func() bool { return pgtest.CountInvocations(t, dbURL, "WHERE namespace = $1", tn.ns) >= 10 })
}

var droppedRE = regexp.MustCompile(`(?m)^sless_gateway_history_dropped_total (\S+)$`)

func droppedMetric(t *testing.T, base string) float64 {
	m := droppedRE.FindStringSubmatch(scrape(t, base))
	if m == nil {
		t.Fatal("/metrics lacks sless_gateway_history_dropped_total")
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// TestInvocationStatsAPI reads a function's buckets back from records in PostgreSQL: counts,
// errors and percentiles in the minute they started, every bucket present, the day's
// coarser buckets; a bad window is a 400 naming the allowed ones, another tenant a 403.
func TestInvocationStatsAPI(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	tn := h.tenant()
	ctx := context.Background()
	now := time.Now()
	fiveAgo, tenAgo := now.Add(-5*time.Minute).Truncate(time.Minute), now.Add(-10*time.Minute).Truncate(time.Minute)
	for i, d := range []time.Duration{10, 20, 30, 40} {
		r := history.HTTPRecord(tn.ns, "charted", fiveAgo.Add(time.Duration(i)*time.Second), d*time.Millisecond, 200, "")
		if i == 3 {
			r = history.HTTPRecord(tn.ns, "charted", r.Start, r.Duration, 500, "")
		}
		h.history.Record(r)
	}
	h.history.Record(history.HTTPRecord(tn.ns, "charted", tenAgo, 5*time.Millisecond, 504, ""))
	h.history.Record(history.HTTPRecord(tn.ns, "other", fiveAgo, time.Millisecond, 200, ""))
	testkit.WaitFor(t, "6 rows in PostgreSQL", 10*time.Second, func() bool { return pgtest.CountInvocations(t, h.dbURL, "WHERE namespace = $1", tn.ns) == 6 })

	st, err := tn.c.InvocationStats(ctx, tn.ns, "charted", "1h")
	if err != nil {
		t.Fatal(err)
	}
	if st.Window != "1h" || st.BucketSec != 60 || len(st.Buckets) != 60 || st.Total.Count != 5 || st.Total.Errors != 2 {
		t.Fatalf("hour: window %s, %ds buckets, %d of them, total %+v", st.Window, st.BucketSec, len(st.Buckets), st.Total)
	}
	for _, b := range st.Buckets {
		switch {
		case b.Start.Equal(fiveAgo):
			if b.Count != 4 || b.Errors != 1 || b.P50Ms == nil || *b.P50Ms != 25 || *b.P95Ms != 38.5 {
				t.Errorf("bucket of five minutes ago: %+v", b.InvocationSummary)
			}
		case b.Start.Equal(tenAgo):
			if b.Count != 1 || b.Errors != 1 || *b.P95Ms != 5 {
				t.Errorf("bucket of ten minutes ago: %+v", b.InvocationSummary)
			}
		case b.Count != 0 || b.P50Ms != nil:
			t.Errorf("bucket %s should be empty: %+v", b.Start, b.InvocationSummary)
		}
	}
	day, err := tn.c.InvocationStats(ctx, tn.ns, "charted", "24h")
	if err != nil || len(day.Buckets) != 96 || day.BucketSec != 900 || day.Total.Count != 5 {
		t.Fatalf("day: %d buckets of %ds, total %+v, %v", len(day.Buckets), day.BucketSec, day.Total, err)
	}
	if def, err := tn.c.InvocationStats(ctx, tn.ns, "charted", ""); err != nil || def.Window != "1h" {
		t.Fatalf("no window: %s, %v; want the hour", def.Window, err)
	}

	base := h.URL + "/v1/namespaces/" + tn.ns + "/functions/charted/stats"
	code, e, _ := do(t, "GET", base+"?window=7d", tn.token, "", nil)
	if code != 400 || e.Field != "window" || !strings.Contains(e.Error, `"7d"`) || !strings.Contains(e.Error, "use 1h or 24h") {
		t.Fatalf("bad window: %d %+v", code, e)
	}
	other := h.tenant()
	if code, e, _ := do(t, "GET", base, other.token, "", nil); code != 403 {
		t.Fatalf("another tenant's stats: %d %+v", code, e)
	}
	if code, _, _ := do(t, "GET", base, "", "", nil); code != 401 {
		t.Fatalf("stats without a token: %d", code)
	}
}

// TestUsageAPI runs the usage table both planes run (backendtest.RunUsage) over the
// PostgreSQL rollups, then meters calls through /fn/: each counted with the function's
// memory (the CRD's default, 128 MiB) by its billed milliseconds.
func TestUsageAPI(t *testing.T) {
	up := newUpstream(t)
	h := newHarness(t, harnessOptions{interceptor: up.URL})
	tn, other := h.tenant(), h.tenant()
	anonymous, err := client.New(h.URL, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	backendtest.RunUsage(t, backendtest.UsagePlane{Tenant: tn.c, Other: other.c, Anonymous: anonymous, Namespace: tn.ns, Recorder: h.history,
		Settle: func(n int) {
			testkit.WaitFor(t, "the records in PostgreSQL", 10*time.Second, func() bool { return pgtest.CountInvocations(t, h.dbURL, "WHERE namespace = $1", tn.ns) == n })
		}})

	fnURL := h.deploy(other, "metered", 0)
	for _, path := range []string{"/echo", "/echo", "/fail"} {
		do(t, "GET", fnURL+path, "", "", nil)
	}
	testkit.WaitFor(t, "3 rows in PostgreSQL", 10*time.Second, func() bool { return pgtest.CountInvocations(t, h.dbURL, "WHERE namespace = $1", other.ns) == 3 })
	u, err := other.c.Usage(context.Background(), other.ns, "", "", "function")
	if err != nil || len(u.Rows) != 1 {
		t.Fatalf("usage by function: %+v, %v", u, err)
	}
	got := u.Rows[0]
	// Each call is billed its duration rounded up: at most a millisecond more.
	low, high := 0.125*got.DurationMs/1000, 0.125*(got.DurationMs+3)/1000
	if got.Function != "metered" || got.Invocations != 3 || got.Errors != 1 || got.GBSeconds < low || got.GBSeconds > high || got.BytesOut <= 0 {
		t.Fatalf("usage of the calls: %+v; want 3 calls, 1 error, %g-%g GB-s of 128 MiB, the bytes sent", got, low, high)
	}
}
