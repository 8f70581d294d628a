package cron

import (
	"testing"

	"sless.dev/sless/gateway/api"
)

// TestValidateCron parses schedules and time zones the way the firing will (moved from
// gateway's decode_test.go with the rule).
func TestValidateCron(t *testing.T) {
	cases := []struct {
		schedule, tz string
		field        string
	}{
		{"*/5 * * * *", "", ""},
		{"0 9 * * MON-FRI", "Europe/Berlin", ""},
		{"@hourly", "UTC", ""},
		{"", "", "schedule"},
		{"* * * *", "", "schedule"},
		{"0 0 * * * *", "", "schedule"},
		{"60 * * * *", "", "schedule"},
		{"@every 5m", "", "schedule"},
		{"CRON_TZ=UTC 0 * * * *", "", "schedule"},
		{"@daily", "Nowhere/City", "timezone"},
		{"@daily", "../etc/passwd", "timezone"},
	}
	for _, tc := range cases {
		err := Kind{}.Validate(api.TriggerSpec{Type: api.TriggerCron, Schedule: tc.schedule, Timezone: tc.tz})
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%q %q: %v", tc.schedule, tc.tz, err)
		case tc.field != "" && (err == nil || err.Field != tc.field):
			t.Errorf("%q %q: %v, want an error on %s", tc.schedule, tc.tz, err, tc.field)
		}
	}
}
