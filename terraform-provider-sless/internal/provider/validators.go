package provider

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

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

// Secrets. Keys and variable names are checked by the rules the API applies; the values of
// a secret are never part of a diagnostic (only their keys and sizes are).

// checkBase64 reports why s is not standard base64, without repeating s.
func checkBase64(s string) error {
	if _, err := base64.StdEncoding.DecodeString(s); err != nil {
		return fmt.Errorf("not standard base64 (%v); encode it with base64encode(...), or put text in data", err)
	}
	return nil
}

// checkSecretData reports what the API would refuse in a secret's data as a whole
// (rules.SecretData: the API's own check).
func checkSecretData(data, dataBase64 map[string]string) error {
	if _, err := rules.SecretData(data, dataBase64); err != nil {
		return err
	}
	return nil
}

// checkSecretEnvNames reports the index of the first secret_env variable that is set
// twice, in secret_env or also in env_vars (envVars), and why; -1 when none is.
func checkSecretEnvNames(envVars map[string]string, names []string) (int, error) {
	seen := map[string]bool{}
	for i, name := range names {
		if _, ok := envVars[name]; ok || seen[name] {
			return i, fmt.Errorf("variable %q is set twice (in env_vars or secret_env); set it once", name)
		}
		seen[name] = true
	}
	return -1, nil
}

// checkSecretDirs reports the index of the first secret_files entry whose directory is the
// same as, inside, or above an earlier entry's (one mount would hide the other), and why; -1
// when they are apart. The directories are checked one by one by path's validator.
func checkSecretDirs(files []api.SecretFile) (int, error) {
	var dirs []string
	for i, f := range files {
		dir := rules.SecretFilePath(f.Secret, f.Path)
		for _, d := range dirs {
			if rules.SecretDirsOverlap(d, dir) {
				return i, fmt.Errorf("%s overlaps %s of another entry; give each secret a directory of its own (path)", dir, d)
			}
		}
		dirs = append(dirs, dir)
	}
	return -1, nil
}

// secretEnvCheck validates secret_env as a whole: no variable set twice, there or in
// env_vars (each entry's fields have their own validators).
type secretEnvCheck struct{}

func (secretEnvCheck) Description(context.Context) string {
	return "each variable set once, in env_vars or secret_env"
}
func (secretEnvCheck) MarkdownDescription(ctx context.Context) string {
	return secretEnvCheck{}.Description(ctx)
}

func (secretEnvCheck) ValidateList(ctx context.Context, req validator.ListRequest, resp *validator.ListResponse) {
	refs, ok := secretEnvRefs(ctx, req.ConfigValue)
	if !ok {
		return
	}
	var env types.Map
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("env_vars"), &env)...)
	if env.IsUnknown() || resp.Diagnostics.HasError() {
		return
	}
	names := make([]string, len(refs))
	for i, r := range refs {
		if r.Name.IsUnknown() {
			return
		}
		names[i] = r.Name.ValueString()
	}
	envVars := map[string]string{}
	for k := range env.Elements() {
		envVars[k] = ""
	}
	if i, err := checkSecretEnvNames(envVars, names); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path.AtListIndex(i).AtName("name"), "Variable set twice", err.Error())
	}
}

// secretDirsCheck validates secret_files as a whole: every secret in a directory of its
// own.
type secretDirsCheck struct{}

func (secretDirsCheck) Description(context.Context) string {
	return "every secret mounted in a directory of its own"
}
func (secretDirsCheck) MarkdownDescription(ctx context.Context) string {
	return secretDirsCheck{}.Description(ctx)
}

func (secretDirsCheck) ValidateList(ctx context.Context, req validator.ListRequest, resp *validator.ListResponse) {
	refs, ok := secretFileRefs(ctx, req.ConfigValue)
	if !ok {
		return
	}
	files := make([]api.SecretFile, len(refs))
	for i, r := range refs {
		if r.Secret.IsUnknown() || r.Path.IsUnknown() {
			return
		}
		files[i] = api.SecretFile{Secret: r.Secret.ValueString(), Path: r.Path.ValueString()}
	}
	if i, err := checkSecretDirs(files); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path.AtListIndex(i).AtName("path"), "Secret directories overlap", err.Error())
	}
}
