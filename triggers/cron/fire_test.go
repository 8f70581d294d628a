package cron_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"sless.dev/sless/dispatcher"
	"sless.dev/sless/history"
	"sless.dev/sless/rules"
	"sless.dev/sless/test/testkit"
	"sless.dev/sless/triggers/cron"
)

// testKey is the key of the function the firings' tests invoke.
var testKey = rules.FunctionKey([]byte("cron-test-master"), "ns", "tick")

func TestNewEventReportsTheTick(t *testing.T) {
	now := time.Date(2026, 11, 29, 9, 0, 3, 500, time.UTC) // a CronJob pod starts 3s after its tick
	cases := []struct {
		schedule, tz, want string
	}{
		{"*/5 * * * *", "", "2026-11-29T09:00:00Z"},
		{"30 8 * * *", "", "2026-11-29T08:30:00Z"},
		{"@hourly", "", "2026-11-29T09:00:00Z"},
		{"0 12 * * *", "Europe/Berlin", "2026-11-28T12:00:00+01:00"}, // now is 10:00 in Berlin: today's 12:00 is ahead
		{"0 0 1 1 *", "", "2026-11-29T09:00:03Z"},                    // no tick in the lookback: now
	}
	for _, tc := range cases {
		ev, err := cron.NewEvent(tc.schedule, tc.tz, now)
		if err != nil || ev.ScheduledTime != tc.want || ev.Type != "cron" || ev.Schedule != tc.schedule {
			t.Errorf("NewEvent(%q, %q) = %+v, %v; want scheduledTime %s", tc.schedule, tc.tz, ev, err, tc.want)
		}
	}
	for _, bad := range []struct{ schedule, tz, field string }{{"* * *", "", "schedule"}, {"@sometimes", "", "schedule"}, {"* * * * *", "Mars/Olympus", "timezone"}} {
		_, err := cron.NewEvent(bad.schedule, bad.tz, now)
		var ce *dispatcher.ConfigError
		if !errors.As(err, &ce) || ce.Field != bad.field {
			t.Errorf("NewEvent(%q, %q) err = %v, want a ConfigError on %s", bad.schedule, bad.tz, err, bad.field)
		}
	}
}

func TestFire(t *testing.T) {
	cases := []struct {
		name      string
		failFirst int // attempts that answer 500
		wantErr   bool
		statuses  string
	}{
		{"succeeds at once", 0, false, "[succeeded]"},
		{"succeeds on the third attempt", 2, false, "[succeeded failed failed]"},
		{"fails on every attempt", 99, true, "[failed failed failed]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var calls, unsigned atomic.Int32
			var event atomic.Value
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !testkit.SignedWith(r, testKey) {
					unsigned.Add(1)
				}
				var ev map[string]any
				_ = json.NewDecoder(r.Body).Decode(&ev)
				event.Store(ev)
				if calls.Add(1) <= int32(tc.failFirst) {
					http.Error(w, "not yet", http.StatusInternalServerError)
				}
			}))
			defer srv.Close()
			inv, err := dispatcher.NewHTTPInvoker(srv.URL, "", 1)
			if err != nil {
				t.Fatal(err)
			}
			inv.Key = testKey
			rec := history.NewMemory(0)
			err = cron.Fire(context.Background(), cron.FireConfig{
				Function: dispatcher.FunctionRef{Namespace: "ns", Name: "tick"}, Trigger: "every-5m", Schedule: "*/5 * * * *",
				Now: time.Date(2026, 11, 29, 9, 1, 0, 0, time.UTC), Retry: dispatcher.RetryPolicy{Backoff: time.Millisecond},
				Invoker: inv, Recorder: rec,
			})
			var ie *dispatcher.InvocationError
			if tc.wantErr != (err != nil) || tc.wantErr && (!errors.As(err, &ie) || ie.Attempts != 3) {
				t.Fatalf("Fire err = %v, want error %v with 3 attempts", err, tc.wantErr)
			}
			if n := unsigned.Load(); n != 0 {
				t.Fatalf("%d attempts reached the function without its signature", n)
			}
			ev := event.Load().(map[string]any)
			if ev["type"] != "cron" || ev["schedule"] != "*/5 * * * *" || ev["scheduledTime"] != "2026-11-29T09:00:00Z" || ev["trigger"] != "every-5m" {
				t.Fatalf("cron event %v", ev)
			}
			pg, _ := rec.List(context.Background(), history.Query{Namespace: "ns", Function: "tick"})
			var statuses []string
			for _, r := range pg.Records {
				if r.Kind != history.KindCron || r.Trigger != "every-5m" {
					t.Fatalf("record %+v not a cron record of the trigger", r)
				}
				statuses = append(statuses, r.Status)
			}
			if got := fmt.Sprint(statuses); got != tc.statuses {
				t.Fatalf("recorded %s, want %s", got, tc.statuses)
			}
		})
	}
}

func TestFireTimeoutIsRecorded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // the server notices the client going away only after the body
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	defer srv.Close()
	inv, _ := dispatcher.NewHTTPInvoker(srv.URL, "", 1)
	rec := history.NewMemory(0)
	err := cron.Fire(context.Background(), cron.FireConfig{
		Function: dispatcher.FunctionRef{Namespace: "ns", Name: "slow"}, Schedule: "@hourly",
		Retry: dispatcher.RetryPolicy{MaxAttempts: 1}, Timeout: 100 * time.Millisecond, Invoker: inv, Recorder: rec,
	})
	if err == nil {
		t.Fatal("a function slower than the timeout succeeded")
	}
	pg, _ := rec.List(context.Background(), history.Query{Namespace: "ns"})
	if len(pg.Records) != 1 || pg.Records[0].Status != history.StatusTimeout {
		t.Fatalf("records %+v, want one timeout", pg.Records)
	}
}
