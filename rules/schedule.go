package rules

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// MaxScheduleLength and MaxTimezoneLength bound a cron trigger's schedule and timezone.
const (
	MaxScheduleLength = 128
	MaxTimezoneLength = 64
)

// scheduleParser reads schedules as every cron firing does (the dispatcher's CronJob,
// sless dev's runner, the pre-warm): five fields or a macro such as @hourly.
var scheduleParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

var timezoneName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_+/-]*$`)

// ParseSchedule parses a schedule CheckSchedule accepts.
func ParseSchedule(schedule string) (cron.Schedule, error) {
	if err := CheckSchedule(schedule); err != nil {
		return nil, err
	}
	return scheduleParser.Parse(schedule)
}

// ScheduleIn is schedule read in the zone tz ("" is UTC), as every firing reads it (the
// cron kind's ticks, the operator's and sless dev's pre-warm); an error is a *FieldError
// naming schedule or timezone.
func ScheduleIn(schedule, tz string) (cron.Schedule, *time.Location, error) {
	loc := time.UTC
	if tz != "" {
		l, err := time.LoadLocation(tz)
		if err != nil {
			return nil, nil, &FieldError{"timezone", fmt.Sprintf("%q is not an IANA time zone (e.g. Europe/Berlin): %v", tz, err)}
		}
		loc = l
	}
	sched, err := ParseSchedule(schedule)
	if err != nil {
		return nil, nil, &FieldError{"schedule", err.Error()}
	}
	return sched, loc, nil
}

// CheckSchedule says why schedule is not one sless fires, or nil; the API and Terraform's
// plan both ask it. @every intervals are refused: they count from whenever the firing process
// started, so every restart would move the ticks.
func CheckSchedule(schedule string) error {
	switch {
	case schedule == "":
		return errors.New(`a cron trigger needs a schedule, e.g. "*/5 * * * *" or @hourly`)
	case len(schedule) > MaxScheduleLength:
		return fmt.Errorf("longer than %d characters", MaxScheduleLength)
	case strings.HasPrefix(schedule, "TZ=") || strings.HasPrefix(schedule, "CRON_TZ="):
		return errors.New("set the zone in timezone, not in the schedule")
	case strings.HasPrefix(schedule, "@every"):
		return errors.New(`@every intervals are not supported; use five fields such as "*/5 * * * *"`)
	}
	if _, err := scheduleParser.Parse(schedule); err != nil {
		return fmt.Errorf("invalid cron schedule %q: %v; use five fields (minute hour day-of-month month day-of-week) or a macro such as @daily", schedule, err)
	}
	return nil
}

// CheckTimezone says why tz is not an IANA zone name this machine knows, or nil.
func CheckTimezone(tz string) error {
	if len(tz) > MaxTimezoneLength || !timezoneName.MatchString(tz) {
		return fmt.Errorf("invalid time zone %q: use an IANA name such as Europe/Berlin", tz)
	}
	if _, err := time.LoadLocation(tz); err != nil {
		return fmt.Errorf("unknown time zone %q: use an IANA name such as Europe/Berlin", tz)
	}
	return nil
}
