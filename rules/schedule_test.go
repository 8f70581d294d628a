package rules

import (
	"strings"
	"testing"
)

func TestCheckSchedule(t *testing.T) {
	tests := []struct {
		schedule string
		problem  string // "" = valid
	}{
		{"*/5 * * * *", ""},
		{"0 9 * * mon-fri", ""},
		{"@hourly", ""},
		{"@daily", ""},
		{"* * * *", "invalid cron schedule"},
		{"0 0 * * * *", "invalid cron schedule"}, // six fields: seconds are not supported
		{"61 * * * *", "invalid cron schedule"},
		{"every minute", "invalid cron schedule"},
		{"@every 5m", "@every intervals are not supported"},
		{"", "needs a schedule"},
		{strings.Repeat("1", MaxScheduleLength+1), "longer than 128 characters"},
		{"TZ=Europe/Berlin 0 9 * * *", "set the zone in timezone"},
		{"CRON_TZ=UTC 0 9 * * *", "set the zone in timezone"},
	}
	for _, tc := range tests {
		t.Run(tc.schedule, func(t *testing.T) {
			err := CheckSchedule(tc.schedule)
			if tc.problem == "" && err != nil || tc.problem != "" && (err == nil || !strings.Contains(err.Error(), tc.problem)) {
				t.Fatalf("CheckSchedule(%q) = %v, want problem %q", tc.schedule, err, tc.problem)
			}
			if _, perr := ParseSchedule(tc.schedule); (perr == nil) != (err == nil) {
				t.Errorf("ParseSchedule and CheckSchedule disagree on %q: %v / %v", tc.schedule, perr, err)
			}
		})
	}
}

func TestCheckTimezone(t *testing.T) {
	tests := map[string]bool{
		"UTC": true, "Europe/Berlin": true, "America/Argentina/Buenos_Aires": true,
		"Mars/Olympus": false, "../../etc/passwd": false, "/etc/localtime": false, "Europe Berlin": false, "": false,
		strings.Repeat("A", MaxTimezoneLength+1): false,
	}
	for tz, ok := range tests {
		if err := CheckTimezone(tz); (err == nil) != ok {
			t.Errorf("CheckTimezone(%q) = %v, want ok=%v", tz, err, ok)
		}
	}
}

func FuzzCheckSchedule(f *testing.F) {
	for _, s := range []string{"*/5 * * * *", "@hourly", "0 9 * * mon-fri", "TZ=UTC 0 * * * *", "* * * *", "@every 5m"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := CheckSchedule(s)
		if err != nil && !strings.Contains(err.Error(), "schedule") && !strings.Contains(err.Error(), "zone") &&
			!strings.Contains(err.Error(), "@every") && !strings.Contains(err.Error(), "characters") {
			t.Fatalf("error %q does not say what to fix", err)
		}
		if err == nil && strings.HasPrefix(s, "@every") {
			t.Fatalf("accepted %q", s)
		}
	})
}

func FuzzCheckTimezone(f *testing.F) {
	for _, s := range []string{"UTC", "Europe/Berlin", "../x", "Local", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tz string) {
		if err := CheckTimezone(tz); err == nil && strings.Contains(tz, "..") {
			t.Fatalf("accepted a path-like zone %q", tz)
		}
	})
}
