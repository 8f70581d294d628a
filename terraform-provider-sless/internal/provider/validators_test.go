package provider

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

func TestCheckJSON(t *testing.T) {
	tests := map[string]bool{`{}`: true, `{"a":[1,2]}`: true, `"s"`: true, `null`: true, ``: false, `{`: false, `{} {}`: false, `{'a':1}`: false}
	for in, ok := range tests {
		if err := checkJSON(in); (err == nil) != ok {
			t.Errorf("checkJSON(%q) = %v, want ok=%v", in, err, ok)
		}
	}
}

func TestCheckEnvNames(t *testing.T) {
	tests := []struct {
		env     map[string]string
		problem string
	}{
		{map[string]string{"GREETING": "", "_x1": ""}, ""},
		{map[string]string{"1ABC": ""}, `invalid variable name "1ABC"`},
		{map[string]string{"A-B": ""}, `invalid variable name "A-B"`},
		{map[string]string{"SLESS_MODE": ""}, "reserved"},
	}
	for _, tc := range tests {
		err := checkEnvNames(tc.env)
		if tc.problem == "" && err != nil || tc.problem != "" && (err == nil || !strings.Contains(err.Error(), tc.problem)) {
			t.Errorf("checkEnvNames(%v) = %v, want problem %q", tc.env, err, tc.problem)
		}
	}
}

func TestCheckTriggerFields(t *testing.T) {
	s := types.StringValue
	null := types.StringNull()
	base := func(typ string) triggerModel {
		return triggerModel{Type: s(typ), Schedule: null, Timezone: null, Queue: null, BrokerSecret: null, BrokerSecretKey: null,
			DeadLetterQueue: null, MaxAttempts: types.Int64Null(), BackoffMs: types.Int64Null(), RequireAuth: types.BoolNull()}
	}
	tests := []struct {
		name   string
		model  func() triggerModel
		errors []string
	}{
		{"http", func() triggerModel { return base("http") }, nil},
		{"http with auth", func() triggerModel { m := base("http"); m.RequireAuth = types.BoolValue(true); return m }, nil},
		{"cron", func() triggerModel { m := base("cron"); m.Schedule = s("@daily"); m.Timezone = s("UTC"); return m }, nil},
		{"cron without schedule", func() triggerModel { return base("cron") }, []string{"Missing schedule"}},
		{"event", func() triggerModel {
			m := base("event")
			m.Queue, m.BrokerSecret, m.MaxAttempts = s("q"), s("amqp"), types.Int64Value(5)
			return m
		}, nil},
		{"event without queue", func() triggerModel { m := base("event"); m.BrokerSecret = s("amqp"); return m }, []string{"Missing queue"}},
		{"http with schedule and queue", func() triggerModel { m := base("http"); m.Schedule, m.Queue = s("@daily"), s("q"); return m },
			[]string{"does not apply to a http trigger", "does not apply to a http trigger"}},
		{"cron with auth", func() triggerModel {
			m := base("cron")
			m.Schedule, m.RequireAuth = s("@daily"), types.BoolValue(true)
			return m
		}, []string{"does not apply to a cron trigger"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			diags := checkTriggerFields(tc.model())
			if len(diags) != len(tc.errors) {
				t.Fatalf("got %d diagnostics %v, want %v", len(diags), diags, tc.errors)
			}
			for i, d := range diags {
				if !strings.Contains(d.Summary(), tc.errors[i]) {
					t.Errorf("diagnostic %q, want %q", d.Summary(), tc.errors[i])
				}
			}
		})
	}
}

func TestImportName(t *testing.T) {
	tests := []struct{ id, want, problem string }{
		{"hello", "hello", ""},
		{"sless-abc/hello", "hello", ""},
		{"sless-other/hello", "", `namespace "sless-other"`},
	}
	for _, tc := range tests {
		got, err := importName(tc.id, "sless-abc")
		if got != tc.want || (tc.problem == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.problem) {
			t.Errorf("importName(%q) = %q, %v; want %q, problem %q", tc.id, got, err, tc.want, tc.problem)
		}
	}
}

// TestSchemasAreValid runs the framework's own schema checks on every type.
func TestSchemasAreValid(t *testing.T) {
	ctx := context.Background()
	p := New("test")()
	var presp provider.SchemaResponse
	p.Schema(ctx, provider.SchemaRequest{}, &presp)
	if d := append(presp.Diagnostics, presp.Schema.ValidateImplementation(ctx)...); d.HasError() {
		t.Fatalf("provider schema: %v", d)
	}
	for _, newRes := range p.Resources(ctx) {
		var resp resource.SchemaResponse
		newRes().Schema(ctx, resource.SchemaRequest{}, &resp)
		if d := append(resp.Diagnostics, resp.Schema.ValidateImplementation(ctx)...); d.HasError() {
			t.Fatalf("resource schema: %v", d)
		}
	}
	for _, newDS := range p.DataSources(ctx) {
		var resp datasource.SchemaResponse
		newDS().Schema(ctx, datasource.SchemaRequest{}, &resp)
		if d := append(resp.Diagnostics, resp.Schema.ValidateImplementation(ctx)...); d.HasError() {
			t.Fatalf("data source schema: %v", d)
		}
	}
}

func FuzzImportName(f *testing.F) {
	for _, s := range []string{"fn", "sless-abc/fn", "a/b/c", "/", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		name, err := importName(id, "sless-abc")
		if err == nil && strings.HasPrefix(id, "sless-abc/") && name != strings.TrimPrefix(id, "sless-abc/") {
			t.Fatalf("importName(%q) = %q", id, name)
		}
	})
}
