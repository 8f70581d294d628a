package backendtest

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/client"
	"sless.dev/sless/history"
)

// UsagePlane is one control plane's gateway for RunUsage: a tenant's client of its own
// namespace, clients of another tenant and without a token, and the plane's history
// recorder with settle, which waits until n records recorded are stored.
type UsagePlane struct {
	Tenant, Other, Anonymous *client.Client
	Namespace                string
	Recorder                 history.Recorder
	Settle                   func(n int)
}

// RunUsage runs the usage API's cases against a plane: three functions' calls over two
// hours of yesterday read by hour, day and function with every figure, the default window
// empty of them, each refused query a 400 naming its parameter, another tenant a 403 and no
// token a 401.
func RunUsage(t *testing.T, p UsagePlane) {
	ctx := context.Background()
	hour := time.Now().UTC().Truncate(24 * time.Hour).Add(-14 * time.Hour) // yesterday 10:00
	records := []history.Record{
		{Function: "a", Start: hour.Add(time.Minute), Duration: 1500 * time.Microsecond, Status: history.StatusSucceeded, MemoryMB: 1024, Bytes: 10, ColdStart: true},
		{Function: "a", Start: hour.Add(2 * time.Minute), Duration: 2 * time.Millisecond, Status: history.StatusFailed, MemoryMB: 1024},
		{Function: "b", Start: hour.Add(90 * time.Minute), Duration: time.Second, Status: history.StatusTimeout, MemoryMB: 512, Bytes: 5},
	}
	for _, r := range records {
		r.Namespace, r.Kind = p.Namespace, history.KindHTTP
		p.Recorder.Record(r)
	}
	p.Settle(len(records))
	from, to := hour.Format(time.RFC3339), hour.Add(2*time.Hour).Format(time.RFC3339)
	// 1024 MB for 2 + 2 ms, 512 MB for 1000 ms.
	a := api.UsageFigures{Invocations: 2, Errors: 1, ColdStarts: 1, DurationMs: 3.5, GBSeconds: 0.004, BytesOut: 10}
	b := api.UsageFigures{Invocations: 1, Errors: 1, DurationMs: 1000, GBSeconds: 0.5, BytesOut: 5}
	total := api.UsageFigures{Invocations: 3, Errors: 2, ColdStarts: 1, DurationMs: 1003.5, GBSeconds: 0.504, BytesOut: 15}
	next := hour.Add(time.Hour)
	for by, want := range map[string][]api.UsageRow{
		"hour":     {{Hour: &hour, UsageFigures: a}, {Hour: &next, UsageFigures: b}},
		"day":      {{Day: hour.Format(time.DateOnly), UsageFigures: total}},
		"function": {{Function: "a", UsageFigures: a}, {Function: "b", UsageFigures: b}},
	} {
		u, err := p.Tenant.Usage(ctx, p.Namespace, from, to, by)
		if err != nil {
			t.Fatalf("by %s: %v", by, err)
		}
		if u.By != by || !u.From.Equal(hour) || !u.To.Equal(hour.Add(2*time.Hour)) || !sameFigures(u.Total, total) || len(u.Rows) != len(want) {
			t.Fatalf("by %s: %+v; want %d rows totalling %+v", by, u, len(want), total)
		}
		for i, w := range want {
			g := u.Rows[i]
			if (w.Hour == nil) != (g.Hour == nil) || w.Hour != nil && !w.Hour.Equal(*g.Hour) || g.Day != w.Day || g.Function != w.Function || !sameFigures(g.UsageFigures, w.UsageFigures) {
				t.Errorf("by %s, row %d: %+v (hour %v); want %+v (hour %v)", by, i, g, g.Hour, w, w.Hour)
			}
		}
	}
	if u, err := p.Tenant.Usage(ctx, p.Namespace, "", "", ""); err != nil || u.By != "hour" || u.To.Sub(u.From) != 25*time.Hour && u.To.Sub(u.From) != 24*time.Hour {
		t.Fatalf("default window: %+v, %v; want the last day by hour", u, err)
	}
	for _, tc := range []struct{ name, from, to, by, field, message string }{
		{"not RFC 3339", "yesterday", "", "", "from", `"yesterday" is not an RFC 3339 time`},
		{"unknown grouping", "", "", "week", "by", `"week" is not a grouping; use hour, day, function`},
		{"to before from", to, from, "", "to", "is not after from"},
		{"32 days by hour", hour.Add(-32 * 24 * time.Hour).Format(time.RFC3339), from, "hour", "from", "longer than the 31 days a read by hour may cover"},
	} {
		_, err := p.Tenant.Usage(ctx, p.Namespace, tc.from, tc.to, tc.by)
		var ae *client.Error
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest || ae.Field != tc.field || !strings.Contains(ae.Message, tc.message) {
			t.Errorf("%s: %v; want a 400 on %s saying %q", tc.name, err, tc.field, tc.message)
		}
	}
	for name, c := range map[string]struct {
		c    *client.Client
		code int
	}{"another tenant": {p.Other, http.StatusForbidden}, "no token": {p.Anonymous, http.StatusUnauthorized}} {
		_, err := c.c.Usage(ctx, p.Namespace, from, to, "")
		if ae := (*client.Error)(nil); !errors.As(err, &ae) || ae.StatusCode != c.code {
			t.Errorf("%s: %v; want %d", name, err, c.code)
		}
	}
}

// sameFigures compares figures, the float ones to a rounding.
func sameFigures(a, b api.UsageFigures) bool {
	near := func(x, y float64) bool { return math.Abs(x-y) < 1e-9 }
	return a.Invocations == b.Invocations && a.Errors == b.Errors && a.ColdStarts == b.ColdStarts && a.BytesOut == b.BytesOut &&
		near(a.DurationMs, b.DurationMs) && near(a.GBSeconds, b.GBSeconds)
}
