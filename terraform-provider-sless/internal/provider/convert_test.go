package provider

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"sless.dev/sless/gateway/api"
)

// stateCase is one mapping of an API value and the prior state value to a new state value.
type stateCase[A any, V attr.Value] struct {
	name  string
	api   A
	prior V
	want  V
}

// testStateMapping runs the cases of a mapping from an API value back to the state.
func testStateMapping[A any, V attr.Value](t *testing.T, name string, mapping func(A, V) V, tests []stateCase[A, V]) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := mapping(tc.api, tc.prior); !got.Equal(tc.want) {
				t.Fatalf("%s(%v, %v) = %v, want %v", name, tc.api, tc.prior, got, tc.want)
			}
		})
	}
}

func TestTimeoutNullWhenUnset(t *testing.T) {
	testStateMapping(t, "timeoutState", timeoutState, []stateCase[int32, types.Int64]{
		{"unset stays null", 0, types.Int64Null(), types.Int64Null()},
		{"import of no limit is null", 0, types.Int64Unknown(), types.Int64Null()},
		{"explicit 0 stays 0", 0, types.Int64Value(0), types.Int64Value(0)},
		{"a limit", 30, types.Int64Null(), types.Int64Value(30)},
		{"limit removed elsewhere", 0, types.Int64Value(30), types.Int64Null()},
	})
	if n := *timeoutSeconds(types.Int64Null()); n != 0 {
		t.Fatalf("null timeout sends %d, want 0 (no limit)", n)
	}
}

func TestEnvState(t *testing.T) {
	ctx := context.Background()
	empty, _ := types.MapValueFrom(ctx, types.StringType, map[string]string{})
	got, _ := envState(ctx, nil, types.MapNull(types.StringType))
	if !got.IsNull() {
		t.Fatalf("no variables and none configured: %v, want null", got)
	}
	got, _ = envState(ctx, nil, empty)
	if !got.Equal(empty) {
		t.Fatalf("no variables and {} configured: %v, want {}", got)
	}
	sent, _ := envVars(ctx, types.MapNull(types.StringType))
	if sent == nil || len(*sent) != 0 {
		t.Fatalf("null env_vars sends %v, want {} (clears them)", sent)
	}
}

func TestEventState(t *testing.T) {
	eventText := func(event string, prior types.String) types.String { return eventState(json.RawMessage(event), prior) }
	testStateMapping(t, "eventState", eventText, []stateCase[string, types.String]{
		{"reformatted by the server", `{"a":1,"b":[1,2]}`, types.StringValue("{\n  \"b\": [1, 2],\n  \"a\": 1\n}"), types.StringValue("{\n  \"b\": [1, 2],\n  \"a\": 1\n}")},
		{"changed elsewhere", `{"a":2}`, types.StringValue(`{"a":1}`), types.StringValue(`{"a":2}`)},
		{"none", ``, types.StringNull(), types.StringNull()},
		{"imported", `{"a":1}`, types.StringNull(), types.StringValue(`{"a":1}`)},
	})
}

func TestTriggerSettled(t *testing.T) {
	frozen := api.TriggerStatus{Message: "enabled is false: frozen in place"}
	waiting := api.TriggerStatus{Message: `waiting for function "f" to be Ready`}
	active := api.TriggerStatus{Active: true}
	tests := []struct {
		name      string
		enabled   bool
		prev, cur api.TriggerStatus
		want      bool
	}{
		{"created, not reconciled yet", true, api.TriggerStatus{}, api.TriggerStatus{}, false},
		{"created and active", true, api.TriggerStatus{}, active, true},
		{"created, waiting for its function", true, api.TriggerStatus{}, waiting, true},
		{"disabled, old status still active", false, active, active, false},
		{"disabled and frozen", false, active, frozen, true},
		{"enabled, old frozen status", true, frozen, frozen, false},
		{"enabled, now waiting for its function", true, frozen, waiting, true},
		{"enabled and active", true, frozen, active, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := triggerSettled(tc.enabled, tc.prev, tc.cur); got != tc.want {
				t.Fatalf("triggerSettled = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSecretRefState(t *testing.T) {
	ctx := context.Background()
	envNull, filesNull := types.ListNull(secretEnvType), types.ListNull(secretFileType)
	emptyEnv, _ := types.ListValueFrom(ctx, secretEnvType, []secretEnvModel{})
	if got, _ := secretEnvState(ctx, nil, envNull); !got.IsNull() {
		t.Fatalf("no secret_env and none configured: %v, want null", got)
	}
	if got, _ := secretEnvState(ctx, nil, emptyEnv); !got.Equal(emptyEnv) {
		t.Fatalf("no secret_env and [] configured: %v, want []", got)
	}
	files, _ := secretFilesState(ctx, []api.SecretFile{{Secret: "db"}, {Secret: "tls", Path: "/srv/tls"}}, filesNull)
	var got []secretFileModel
	files.ElementsAs(ctx, &got, false)
	if len(got) != 2 || !got[0].Path.IsNull() || got[1].Path.ValueString() != "/srv/tls" {
		t.Fatalf("secret_files state %v: want the default directory as null, a path as given", got)
	}
	// Removed from the configuration: both lists are sent empty, which removes the references.
	env, sent, _ := secretRefFields(ctx, envNull, filesNull)
	if env == nil || sent == nil || len(*env) != 0 || len(*sent) != 0 {
		t.Fatalf("null lists send %v, %v; want [] and []", env, sent)
	}
	b, _ := json.Marshal(api.FunctionFields{SecretEnv: env, SecretFiles: sent})
	if string(b) != `{"secret_env":[],"secret_files":[]}` {
		t.Fatalf("request %s", b)
	}
	_, back, _ := secretRefFields(ctx, envNull, files)
	if want := []api.SecretFile{{Secret: "db"}, {Secret: "tls", Path: "/srv/tls"}}; !slices.Equal(*back, want) {
		t.Fatalf("secret_files sends %v, want %v", *back, want)
	}
}
