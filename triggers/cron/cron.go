// Package cron is the cron trigger kind: it fires its function at every tick of a schedule
// in a time zone, optionally waking it prewarm_seconds before.
package cron

import (
	"fmt"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
	"sless.dev/sless/triggers/kind"
)

// Kind is the cron trigger kind.
type Kind struct{}

var _ kind.Kind = Kind{}

func (Kind) Name() string { return api.TriggerCron }

func (Kind) Takes() string { return "a cron trigger takes schedule, timezone and prewarm_seconds only" }

func (Kind) Fields() []kind.Field {
	return []kind.Field{
		{Name: "schedule", Required: true, Exclusive: true,
			Get: func(s api.TriggerSpec) any { return s.Schedule },
			Set: func(s *api.TriggerSpec, f api.TriggerFields) { kind.SetIf(&s.Schedule, f.Schedule) }},
		{Name: "timezone", Exclusive: true,
			Get: func(s api.TriggerSpec) any { return s.Timezone },
			Set: func(s *api.TriggerSpec, f api.TriggerFields) { kind.SetIf(&s.Timezone, f.Timezone) }},
		{Name: "prewarm_seconds", Exclusive: true,
			Get: func(s api.TriggerSpec) any { return s.PrewarmSeconds },
			Set: func(s *api.TriggerSpec, f api.TriggerFields) { kind.SetIf(&s.PrewarmSeconds, f.PrewarmSeconds) }},
	}
}

func (Kind) Default(*api.TriggerSpec) {}

// Validate parses the schedule and time zone the way the firing will.
func (Kind) Validate(s api.TriggerSpec) *rules.FieldError {
	if err := rules.CheckRange("prewarm_seconds", int64(s.PrewarmSeconds), 0, rules.MaxPrewarmSeconds); err != nil {
		return err
	}
	if err := rules.CheckSchedule(s.Schedule); err != nil {
		return &rules.FieldError{Field: "schedule", Reason: err.Error()}
	}
	if s.Timezone == "" {
		return nil
	}
	if err := rules.CheckTimezone(s.Timezone); err != nil {
		return &rules.FieldError{Field: "timezone", Reason: err.Error()}
	}
	return nil
}

func (Kind) SecretRefs(api.TriggerSpec) []kind.SecretRef { return nil }

// Source is the schedule, its time zone and its pre-warm: "0 3 * * * (Europe/Berlin) · warm
// 60 s before each tick".
func (Kind) Source(t api.Trigger) string {
	out := t.Schedule
	if t.Timezone != "" {
		out += " (" + t.Timezone + ")"
	}
	if t.PrewarmSeconds > 0 {
		out += fmt.Sprintf(" · warm %d s before each tick", t.PrewarmSeconds)
	}
	return out
}

func (Kind) FromCRD(s v1alpha1.TriggerSpec, out *api.TriggerSpec) {
	if c := s.Cron; c != nil {
		out.Schedule, out.Timezone, out.PrewarmSeconds = c.Schedule, c.Timezone, c.PrewarmSeconds
	}
}

func (k Kind) ToCRD(s api.TriggerSpec, dst *v1alpha1.TriggerSpec) {
	if s.Type != k.Name() {
		dst.Cron = nil
		return
	}
	if dst.Cron == nil {
		dst.Cron = &v1alpha1.CronSpec{}
	}
	dst.Cron.Schedule, dst.Cron.Timezone, dst.Cron.PrewarmSeconds = s.Schedule, s.Timezone, s.PrewarmSeconds
}

func (Kind) CRDFields() map[string]string {
	return map[string]string{"spec.cron": "schedule", "spec.cron.timezone": "timezone"}
}

func (Kind) Routes() bool { return false }

// Cluster is a CronJob running `sless dispatcher fire` at exact ticks (KEDA's cron scaler is
// window-based).
func (Kind) Cluster(s v1alpha1.TriggerSpec) kind.Cluster {
	c := s.Cron
	out := kind.Cluster{
		Args: []string{"dispatcher", fireCommand, "--schedule=" + c.Schedule},
		Schedule: &kind.Schedule{Cron: c.Schedule, TimeZone: c.Timezone, ConcurrencyPolicy: c.ConcurrencyPolicy,
			StartingDeadlineSeconds: c.StartingDeadlineSeconds, PrewarmSeconds: c.PrewarmSeconds},
	}
	if c.Timezone != "" {
		out.Flags = []string{"--timezone=" + c.Timezone}
	}
	return out
}
