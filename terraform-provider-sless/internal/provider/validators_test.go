package provider

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
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
		{map[string]string{"PATH": ""}, "reserved"},
		{map[string]string{"PYTHONPATH": ""}, "reserved"},
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

// TestTriggerSchemaHasEveryKindsFields: every field of every trigger kind (api.TriggerKinds,
// generated from the registry) is a configurable attribute of sless_trigger, so a kind's new
// field fails here until the provider has it.
func TestTriggerSchemaHasEveryKindsFields(t *testing.T) {
	var resp resource.SchemaResponse
	NewTriggerResource().Schema(context.Background(), resource.SchemaRequest{}, &resp)
	for _, k := range api.TriggerKinds {
		for _, f := range k.Fields {
			a, ok := resp.Schema.Attributes[f.Name]
			switch {
			case !ok:
				t.Errorf("the %s trigger's field %s is no attribute of sless_trigger", k.Name, f.Name)
			case !a.IsRequired() && !a.IsOptional():
				t.Errorf("the %s trigger's field %s is an attribute of sless_trigger that a configuration cannot set", k.Name, f.Name)
			}
		}
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

func TestCheckSecretData(t *testing.T) {
	b64 := func(n int) string { return base64.StdEncoding.EncodeToString(make([]byte, n)) }
	many := map[string]string{}
	for i := range rules.MaxSecretKeys + 1 {
		many[fmt.Sprintf("k%d", i)] = ""
	}
	tests := []struct {
		name         string
		data, data64 map[string]string
		problem      string
	}{
		{"text", map[string]string{"password": "x"}, nil, ""},
		{"binary", nil, map[string]string{"tls.key": b64(10)}, ""},
		{"both maps", map[string]string{"user": "app"}, map[string]string{"cert": b64(3)}, ""},
		{"no key", nil, map[string]string{}, "at least one key"},
		{"key in both", map[string]string{"k": "x"}, map[string]string{"k": b64(1)}, `key "k" is also in data`},
		{"too many keys", many, nil, fmt.Sprintf("at most %d", rules.MaxSecretKeys)},
		{"too large text", map[string]string{"k": strings.Repeat("x", rules.MaxSecretBytes)}, nil, "bytes in keys and values"},
		// The decoded size counts, not the base64 text.
		{"binary at the limit", nil, map[string]string{"k": b64(rules.MaxSecretBytes - 1)}, ""},
		{"binary above the limit", nil, map[string]string{"k": b64(rules.MaxSecretBytes)}, "bytes in keys and values"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkSecretData(tc.data, tc.data64)
			if tc.problem == "" && err != nil || tc.problem != "" && (err == nil || !strings.Contains(err.Error(), tc.problem)) {
				t.Fatalf("checkSecretData = %v, want problem %q", err, tc.problem)
			}
		})
	}
}

// TestSecretDiagnosticsHideValues: a diagnostic about a secret's data names keys and sizes,
// never a value.
func TestSecretDiagnosticsHideValues(t *testing.T) {
	const value = "hunter2-value"
	for _, err := range []error{
		checkBase64(value + "!"),
		checkSecretData(map[string]string{"k": value}, map[string]string{"k": value}),
		checkSecretData(map[string]string{"k": value + strings.Repeat("x", rules.MaxSecretBytes)}, nil),
	} {
		if err == nil || strings.Contains(err.Error(), value) {
			t.Errorf("diagnostic %v: want an error that does not repeat the value", err)
		}
	}
	if err := checkBase64(base64.StdEncoding.EncodeToString([]byte(value))); err != nil {
		t.Errorf("checkBase64 of base64: %v", err)
	}
}

func TestCheckSecretEnvNames(t *testing.T) {
	tests := []struct {
		env   map[string]string
		names []string
		index int
	}{
		{map[string]string{"GREETING": "hi"}, []string{"DB_USER", "DB_PASSWORD"}, -1},
		{nil, []string{"A", "B", "A"}, 2},
		{map[string]string{"TOKEN": ""}, []string{"A", "TOKEN"}, 1},
	}
	for _, tc := range tests {
		i, err := checkSecretEnvNames(tc.env, tc.names)
		if i != tc.index || (err == nil) != (tc.index < 0) || err != nil && !strings.Contains(err.Error(), "set twice") {
			t.Errorf("checkSecretEnvNames(%v, %v) = %d, %v; want index %d", tc.env, tc.names, i, err, tc.index)
		}
	}
}

func TestCheckSecretDirs(t *testing.T) {
	tests := []struct {
		files []api.SecretFile
		index int
	}{
		{[]api.SecretFile{{Secret: "db"}, {Secret: "tls"}, {Secret: "x", Path: "/srv/x"}}, -1},
		{[]api.SecretFile{{Secret: "db"}, {Secret: "db"}}, 1},
		{[]api.SecretFile{{Secret: "db"}, {Secret: "x", Path: rules.SecretMountDir + "/db/x"}}, 1},
		{[]api.SecretFile{{Secret: "x", Path: "/srv/a"}, {Secret: "y", Path: "/srv"}}, 1},
		{[]api.SecretFile{{Secret: "x", Path: "/srv/a"}, {Secret: "y", Path: "/srv/ab"}}, -1},
	}
	for _, tc := range tests {
		i, err := checkSecretDirs(tc.files)
		if i != tc.index || (err == nil) != (tc.index < 0) {
			t.Errorf("checkSecretDirs(%v) = %d, %v; want index %d", tc.files, i, err, tc.index)
		}
	}
}

// TestSecretRefValidators runs the plan-time validators of the schemas on single values:
// the rules of the API, wired to the right attributes.
func TestSecretRefValidators(t *testing.T) {
	ctx := context.Background()
	var fn, sec resource.SchemaResponse
	NewFunctionResource().Schema(ctx, resource.SchemaRequest{}, &fn)
	NewSecretResource().Schema(ctx, resource.SchemaRequest{}, &sec)
	nested := func(list, attr string) schema.StringAttribute {
		return fn.Schema.Attributes[list].(schema.ListNestedAttribute).NestedObject.Attributes[attr].(schema.StringAttribute)
	}
	tests := []struct {
		attr  string
		v     schema.StringAttribute
		value string
		ok    bool
	}{
		{"secret_env.name", nested("secret_env", "name"), "DB_PASSWORD", true},
		{"secret_env.name", nested("secret_env", "name"), "PATH", false},
		{"secret_env.name", nested("secret_env", "name"), "LD_PRELOAD", false},
		{"secret_env.name", nested("secret_env", "name"), "NODE_OPTIONS", false},
		{"secret_env.name", nested("secret_env", "name"), "SLESS_TOKEN", false},
		{"secret_env.name", nested("secret_env", "name"), "1X", false},
		{"secret_env.secret", nested("secret_env", "secret"), "db", true},
		{"secret_env.secret", nested("secret_env", "secret"), "Db_1", false},
		{"secret_env.key", nested("secret_env", "key"), "tls.key", true},
		{"secret_env.key", nested("secret_env", "key"), "a/b", false},
		{"secret_env.key", nested("secret_env", "key"), "..", false},
		{"secret_files.secret", nested("secret_files", "secret"), "tls", true},
		{"secret_files.path", nested("secret_files", "path"), "/srv/tls", true},
		{"secret_files.path", nested("secret_files", "path"), "srv/tls", false},
		{"secret_files.path", nested("secret_files", "path"), "/etc/tls", false},
		{"secret_files.path", nested("secret_files", "path"), "/app/conf", false},
		{"secret_files.path", nested("secret_files", "path"), "/srv/../etc", false},
		{"secret_files.path", nested("secret_files", "path"), "", false},
	}
	for _, tc := range tests {
		var diags diag.Diagnostics
		for _, v := range tc.v.Validators {
			var resp validator.StringResponse
			v.ValidateString(ctx, validator.StringRequest{Path: path.Root(tc.attr), ConfigValue: types.StringValue(tc.value)}, &resp)
			diags.Append(resp.Diagnostics...)
		}
		if diags.HasError() == tc.ok {
			t.Errorf("%s = %q: diagnostics %v, want ok=%v", tc.attr, tc.value, diags, tc.ok)
		}
	}
	// The maps of a secret: keys by rules.CheckSecretKey, data_base64's values as base64.
	mapTests := []struct {
		attr string
		m    map[string]string
		ok   bool
	}{
		{"data", map[string]string{"password": "x", "tls.crt": "y"}, true},
		{"data", map[string]string{"a b": "x"}, false},
		{"data", map[string]string{".": "x"}, false},
		{"data_base64", map[string]string{"k": "AAEC"}, true},
		{"data_base64", map[string]string{"k": "not base64!"}, false},
	}
	for _, tc := range mapTests {
		value, _ := types.MapValueFrom(ctx, types.StringType, tc.m)
		var diags diag.Diagnostics
		for _, v := range sec.Schema.Attributes[tc.attr].(schema.MapAttribute).Validators {
			var resp validator.MapResponse
			v.ValidateMap(ctx, validator.MapRequest{Path: path.Root(tc.attr), ConfigValue: value}, &resp)
			diags.Append(resp.Diagnostics...)
		}
		if diags.HasError() == tc.ok {
			t.Errorf("%s = %v: diagnostics %v, want ok=%v", tc.attr, tc.m, diags, tc.ok)
		}
	}
}
