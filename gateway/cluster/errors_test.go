package cluster_test

import (
	"context"
	"errors"
	"testing"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
)

// TestBackendMapsAPIServerErrors writes specs the gateway's own validation would stop straight
// to the backend, so the API server's schema and CEL rules reject them; the backend must turn
// each rejection into an InvalidError naming the API field.
func TestBackendMapsAPIServerErrors(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	tn := h.tenant()
	ctx := context.Background()
	b := h.backend
	fn := func(mut func(*api.FunctionSpec)) func() error {
		return func() error {
			s := api.FunctionSpec{Runtime: "go1.23", MemoryMB: 128, MaxReplicas: 10, ScaleDownPeriodSec: 300, ScalingMetric: "concurrency", ScalingTarget: 100}
			mut(&s)
			_, err := b.Functions().Create(ctx, tn.ns, "f-"+randomHex(3), s)
			return err
		}
	}
	cases := []struct {
		name  string
		write func() error
		field string
	}{
		{"runtime enum", fn(func(s *api.FunctionSpec) { s.Runtime = "cobol" }), "runtime"},
		{"memory minimum", fn(func(s *api.FunctionSpec) { s.MemoryMB = 8 }), "memory_mb"},
		{"timeout maximum", fn(func(s *api.FunctionSpec) { s.TimeoutSec = 901 }), "timeout_sec"},
		{"max below min (CEL)", fn(func(s *api.FunctionSpec) { s.MinReplicas, s.MaxReplicas = 5, 2 }), "max_replicas"},
		{"reserved env (CEL)", fn(func(s *api.FunctionSpec) { s.EnvVars = map[string]string{"SLESS_X": "1"} }), "env_vars"},
		{"protocol enum", fn(func(s *api.FunctionSpec) { s.Image, s.Protocol = "reg.example/app:1", "h3" }), "protocol"},
		{"h2c without an image (CEL)", fn(func(s *api.FunctionSpec) { s.Protocol = "h2c" }), "protocol"},
		{"invalid name", func() error {
			_, err := b.Functions().Create(ctx, tn.ns, "Bad_Name", api.FunctionSpec{Runtime: "go1.23", MemoryMB: 128})
			return err
		}, "name"},
		{"cron trigger without schedule (CEL)", func() error {
			_, err := b.Triggers().Create(ctx, tn.ns, "t-"+randomHex(3), api.TriggerSpec{Type: "cron", Function: "f", Enabled: true, Schedule: ""})
			return err
		}, "schedule"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.write()
			var iv *backend.InvalidError
			if !errors.As(err, &iv) || iv.Field != tc.field || iv.Reason == "" {
				t.Fatalf("error %v (%T), want InvalidError on %q", err, err, tc.field)
			}
		})
	}

	// The type is immutable by a CEL transition rule.
	if _, err := b.Triggers().Create(ctx, tn.ns, "web", api.TriggerSpec{Type: "http", Function: "f", Enabled: true}); err != nil {
		t.Fatal(err)
	}
	_, err := b.Triggers().Update(ctx, tn.ns, "web", func(s *api.TriggerSpec) error { s.Type, s.Schedule = "cron", "@daily"; return nil })
	var iv *backend.InvalidError
	if !errors.As(err, &iv) || iv.Field != "type" {
		t.Fatalf("type change: %v, want InvalidError on type", err)
	}
}
