package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
)

// These checks run at plan time and mirror what the API enforces, so a mistake is reported by
// `terraform plan` with the attribute's path instead of half-way through an apply.

func nameValidators() []validator.String {
	return []validator.String{
		stringvalidator.LengthBetween(1, rules.MaxNameLength),
		stringvalidator.RegexMatches(rules.NamePattern, "must be lowercase letters, digits and '-', starting and ending with a letter or digit (a DNS label)"),
	}
}

func runtimeValidators() []validator.String {
	return []validator.String{stringvalidator.OneOf(api.Runtimes...)}
}

func timeoutValidators() []validator.Int64 {
	return []validator.Int64{int64validator.Between(0, rules.MaxTimeoutSeconds)}
}

// checkJSON reports why s is not one JSON value, or nil.
func checkJSON(s string) error {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return fmt.Errorf("not valid JSON: %v; use jsonencode({...})", err)
	}
	return nil
}

// checkEnvNames reports the first variable name the runtime would refuse, or nil.
func checkEnvNames(env map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if err := rules.CheckEnvName(k); err != nil {
			return err
		}
	}
	return nil
}

// stringCheck adapts a check function to a schema validator.
type stringCheck struct {
	desc  string
	check func(string) error
}

func (v stringCheck) Description(context.Context) string         { return v.desc }
func (v stringCheck) MarkdownDescription(context.Context) string { return v.desc }

func (v stringCheck) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if err := v.check(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid "+v.desc, err.Error())
	}
}

// envCheck validates env_vars' keys.
type envCheck struct{}

func (envCheck) Description(context.Context) string { return "environment variable names" }
func (envCheck) MarkdownDescription(ctx context.Context) string {
	return envCheck{}.Description(ctx)
}

func (envCheck) ValidateMap(ctx context.Context, req validator.MapRequest, resp *validator.MapResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	env := map[string]string{}
	for k := range req.ConfigValue.Elements() {
		env[k] = ""
	}
	if err := checkEnvNames(env); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid environment variable", err.Error())
	}
}
