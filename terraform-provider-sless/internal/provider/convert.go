package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// Conversions between Terraform values and the API's wire values. The API reports "unset" as
// a zero value; Terraform users expect null for what they did not write, so zero values map
// back to null unless the prior state already held the zero value explicitly.

func stringOrNull(s string) types.String {
	if s == "" {
		return types.StringNull()
	}
	return types.StringValue(s)
}

func int64OrNull(v int32) types.Int64 {
	if v == 0 {
		return types.Int64Null()
	}
	return types.Int64Value(int64(v))
}

// setString returns a pointer to v's value, or nil when v is null or unknown (not sent).
func setString(v types.String) *string {
	if v.IsNull() || v.IsUnknown() {
		return nil
	}
	s := v.ValueString()
	return &s
}

// clearingString returns a pointer to v's value: "" for null, so that an update clears a
// field removed from the configuration.
func clearingString(v types.String) *string {
	s := v.ValueString()
	return &s
}

// setInt32 returns a pointer to v's value, or nil when v is null or unknown (not sent).
func setInt32(v types.Int64) *int32 {
	if v.IsNull() || v.IsUnknown() {
		return nil
	}
	n := int32(v.ValueInt64())
	return &n
}

// int64OrDefault is v, or def when v is null or unknown: the state of an attribute with a
// provider-side default that the prior plan or state did not hold.
func int64OrDefault(v types.Int64, def int64) types.Int64 {
	if v.IsNull() || v.IsUnknown() {
		return types.Int64Value(def)
	}
	return v
}

// timeoutSeconds is the API value of timeout_sec: null (unset) is 0, no limit.
func timeoutSeconds(v types.Int64) *int32 {
	n := int32(0)
	if !v.IsNull() && !v.IsUnknown() {
		n = int32(v.ValueInt64())
	}
	return &n
}

// timeoutState maps the API's 0 (no limit) back to null unless the user wrote 0.
func timeoutState(v int32, prior types.Int64) types.Int64 {
	if v == 0 && (prior.IsNull() || prior.IsUnknown() || prior.ValueInt64() != 0) {
		return types.Int64Null()
	}
	return types.Int64Value(int64(v))
}

// envVars is the API value of env_vars: null sends an empty map, which clears the variables.
func envVars(ctx context.Context, v types.Map) (*map[string]string, diag.Diagnostics) {
	env := map[string]string{}
	if v.IsNull() || v.IsUnknown() {
		return &env, nil
	}
	diags := v.ElementsAs(ctx, &env, false)
	return &env, diags
}

// envState maps the API's variables back, keeping null when there are none and none were set.
func envState(ctx context.Context, env map[string]string, prior types.Map) (types.Map, diag.Diagnostics) {
	if len(env) == 0 && (prior.IsNull() || prior.IsUnknown()) {
		return types.MapNull(types.StringType), nil
	}
	if env == nil {
		env = map[string]string{} // a nil map would convert to null
	}
	return types.MapValueFrom(ctx, types.StringType, env)
}

// objectID is the Terraform id of an object: namespace/name.
func objectID(ns, name string) types.String { return types.StringValue(ns + "/" + name) }

// importName accepts "name" or "namespace/name" (the id) for the provider's namespace.
func importName(id, namespace string) (string, error) {
	ns, name, found := strings.Cut(id, "/")
	if !found {
		return id, nil
	}
	if ns != namespace {
		return "", fmt.Errorf("%q is in namespace %q, but the provider's token belongs to namespace %q; import by name or with the token of that tenant", id, ns, namespace)
	}
	return name, nil
}

// quotedList renders values as a Markdown list of code spans for descriptions.
func quotedList(values []string) string {
	return "`" + strings.Join(values, "`, `") + "`"
}
