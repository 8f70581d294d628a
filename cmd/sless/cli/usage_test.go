package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/test/testkit"
)

// TestUsageCommand: `sless usage` sends its flags as the API's query and prints a row per
// group and the total, or the API's own body with -o json.
func TestUsageCommand(t *testing.T) {
	fake := startFakeAPI(t)
	from := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	fake.usage = api.Usage{From: from, To: from.Add(48 * time.Hour), By: "function", Rows: []api.UsageRow{
		{Function: "resize", UsageFigures: api.UsageFigures{Invocations: 10, Errors: 1, ColdStarts: 2, DurationMs: 1234.5, GBSeconds: 0.154312, BytesOut: 4096}},
		{Function: "thumb", UsageFigures: api.UsageFigures{Invocations: 1, DurationMs: 1}},
	}, Total: api.UsageFigures{Invocations: 11, Errors: 1, ColdStarts: 2, DurationMs: 1235.5, GBSeconds: 0.154312, BytesOut: 4096}}

	out, err := testkit.RunCommand(t, newUsageCmd, "--by", "function", "--from", "2026-03-01T00:00:00Z", "--to", "2026-03-03T00:00:00Z")
	if err != nil {
		t.Fatalf("usage: %v\n%s", err, out)
	}
	q := fake.usageQueries[0]
	if q.Get("by") != "function" || q.Get("from") != "2026-03-01T00:00:00Z" || q.Get("to") != "2026-03-03T00:00:00Z" {
		t.Errorf("query %v", q)
	}
	want := "" +
		"FUNCTION                                             INVOCATIONS   ERRORS   COLD STARTS   DURATION (MS)   GB-SECONDS   BYTES OUT\n" +
		"resize                                               10            1        2             1234.500        0.154312     4096\n" +
		"thumb                                                1             0        0             1.000           0.000000     0\n" +
		"TOTAL 2026-03-01T00:00:00Z to 2026-03-03T00:00:00Z   11            1        2             1235.500        0.154312     4096\n"
	if out != want {
		t.Errorf("table:\n%s\nwant:\n%s", out, want)
	}

	out, err = testkit.RunCommand(t, newUsageCmd, "-o", "json")
	var got api.Usage
	if err != nil || json.Unmarshal([]byte(out), &got) != nil || got.Total != fake.usage.Total || len(fake.usageQueries) != 2 || fake.usageQueries[1].Get("by") != "hour" {
		t.Errorf("-o json: %v, %+v, queries %v\n%s", err, got, fake.usageQueries, out)
	}
	if _, err := testkit.RunCommand(t, newUsageCmd, "-o", "wide"); err == nil || !strings.Contains(err.Error(), "-o wide") {
		t.Errorf("-o wide: %v", err)
	}
}
