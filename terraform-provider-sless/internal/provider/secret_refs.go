package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	dsschema "github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
)

// A function's secret_env and secret_files: references to secrets by name and key. The
// function object, its state and its plan hold these names, never a value.

// secretEnvModel is one secret_env entry.
type secretEnvModel struct {
	Name   types.String `tfsdk:"name"`
	Secret types.String `tfsdk:"secret"`
	Key    types.String `tfsdk:"key"`
}

// secretFileModel is one secret_files entry; a null path is the default directory.
type secretFileModel struct {
	Secret types.String `tfsdk:"secret"`
	Path   types.String `tfsdk:"path"`
}

var (
	secretEnvType  = types.ObjectType{AttrTypes: map[string]attr.Type{"name": types.StringType, "secret": types.StringType, "key": types.StringType}}
	secretFileType = types.ObjectType{AttrTypes: map[string]attr.Type{"secret": types.StringType, "path": types.StringType}}
)

const (
	secretEnvDesc = "Environment variables set from keys of the tenant's secrets (`sless_secret`): a list of `{ name, secret, key }`, " +
		"e.g. `{ name = \"DB_PASSWORD\", secret = sless_secret.db.name, key = \"password\" }`. The function holds the reference, " +
		"never the value; a rotation of the secret restarts the function with the new value. `name` follows the rules of " +
		"`env_vars` (not also set there, no `SLESS_` prefix, not a variable the runtime owns such as `PATH`, `LD_PRELOAD`, " +
		"`NODE_OPTIONS` or `PYTHONPATH`). Refer to the secret as `sless_secret.<label>.name` so that Terraform creates it " +
		"before the function and destroys it after. Changes apply in place."
	secretFilesDesc = "Secrets mounted as files: a list of `{ secret, path }`; every key of `secret` becomes a read-only file named " +
		"as the key in the directory `path` (absolute; default `" + rules.SecretMountDir + "/<secret>`), one directory per " +
		"secret. Not under `/app`, `/etc`, `/tmp` or another system directory. `sless dev` shows files only to sandboxed " +
		"functions (root on Linux); use `secret_env` there otherwise. Changes apply in place."
)

// secretRefAttributes are the resource schema attributes secret_env and secret_files.
func secretRefAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"secret_env": schema.ListNestedAttribute{
			Optional: true, MarkdownDescription: secretEnvDesc,
			Validators: []validator.List{listvalidator.SizeAtMost(rules.MaxSecretRefs), secretEnvCheck{}},
			NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
				"name": schema.StringAttribute{
					Required: true, MarkdownDescription: "Variable name.",
					Validators: []validator.String{stringCheck{desc: "environment variable name", check: rules.CheckEnvName}},
				},
				"secret": schema.StringAttribute{
					Required: true, MarkdownDescription: "Name of the secret.", Validators: nameValidators(),
				},
				"key": schema.StringAttribute{
					Required: true, MarkdownDescription: "Key in the secret whose value the variable gets.",
					Validators: []validator.String{stringCheck{desc: "secret key", check: rules.CheckSecretKey}},
				},
			}},
		},
		"secret_files": schema.ListNestedAttribute{
			Optional: true, MarkdownDescription: secretFilesDesc,
			Validators: []validator.List{listvalidator.SizeAtMost(rules.MaxSecretRefs), secretDirsCheck{}},
			NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
				"secret": schema.StringAttribute{
					Required: true, MarkdownDescription: "Name of the secret.", Validators: nameValidators(),
				},
				"path": schema.StringAttribute{
					Optional: true, MarkdownDescription: "Directory of the files (default `" + rules.SecretMountDir + "/<secret>`).",
					Validators: []validator.String{stringCheck{desc: "directory for secret files", check: rules.CheckSecretDir}},
				},
			}},
		},
	}
}

// secretRefDataAttributes are secret_env and secret_files as the data source reports them.
func secretRefDataAttributes() map[string]dsschema.Attribute {
	str := func(desc string) dsschema.StringAttribute {
		return dsschema.StringAttribute{Computed: true, MarkdownDescription: desc}
	}
	return map[string]dsschema.Attribute{
		"secret_env": dsschema.ListNestedAttribute{
			Computed: true, MarkdownDescription: "Variables set from secrets: `{ name, secret, key }` (references, never values).",
			NestedObject: dsschema.NestedAttributeObject{Attributes: map[string]dsschema.Attribute{
				"name": str("Variable name."), "secret": str("Name of the secret."), "key": str("Key in the secret."),
			}},
		},
		"secret_files": dsschema.ListNestedAttribute{
			Computed: true, MarkdownDescription: "Secrets mounted as files: `{ secret, path }` (null path: `" + rules.SecretMountDir + "/<secret>`).",
			NestedObject: dsschema.NestedAttributeObject{Attributes: map[string]dsschema.Attribute{
				"secret": str("Name of the secret."), "path": str("Directory of the files."),
			}},
		},
	}
}

// listObjects reads the objects of a list into models; ok is false when the list or one of
// its objects is not known yet (a validator then waits for the apply-time check).
func listObjects[M any](ctx context.Context, v types.List) ([]M, bool) {
	if v.IsNull() || v.IsUnknown() {
		return nil, false
	}
	out := make([]M, 0, len(v.Elements()))
	for _, e := range v.Elements() {
		obj, ok := e.(types.Object)
		if !ok || obj.IsUnknown() || obj.IsNull() {
			return nil, false
		}
		var m M
		if diags := obj.As(ctx, &m, basetypes.ObjectAsOptions{}); diags.HasError() {
			return nil, false
		}
		out = append(out, m)
	}
	return out, true
}

func secretEnvRefs(ctx context.Context, v types.List) ([]secretEnvModel, bool) {
	return listObjects[secretEnvModel](ctx, v)
}

func secretFileRefs(ctx context.Context, v types.List) ([]secretFileModel, bool) {
	return listObjects[secretFileModel](ctx, v)
}

// secretRefFields are the API values of secret_env and secret_files: both always sent, a
// null list as [], so that removing them from the configuration removes the references.
func secretRefFields(ctx context.Context, env, files types.List) (*[]api.SecretEnv, *[]api.SecretFile, diag.Diagnostics) {
	var diags diag.Diagnostics
	envOut, filesOut := []api.SecretEnv{}, []api.SecretFile{}
	if !env.IsNull() && !env.IsUnknown() {
		var refs []secretEnvModel
		diags.Append(env.ElementsAs(ctx, &refs, false)...)
		for _, r := range refs {
			envOut = append(envOut, api.SecretEnv{Name: r.Name.ValueString(), Secret: r.Secret.ValueString(), Key: r.Key.ValueString()})
		}
	}
	if !files.IsNull() && !files.IsUnknown() {
		var refs []secretFileModel
		diags.Append(files.ElementsAs(ctx, &refs, false)...)
		for _, r := range refs {
			filesOut = append(filesOut, api.SecretFile{Secret: r.Secret.ValueString(), Path: r.Path.ValueString()})
		}
	}
	return &envOut, &filesOut, diags
}

// secretEnvState maps the API's secret_env back, null when there is none and none was set
// (as envState does for env_vars).
func secretEnvState(ctx context.Context, refs []api.SecretEnv, prior types.List) (types.List, diag.Diagnostics) {
	if len(refs) == 0 && (prior.IsNull() || prior.IsUnknown()) {
		return types.ListNull(secretEnvType), nil
	}
	out := make([]secretEnvModel, len(refs))
	for i, r := range refs {
		out[i] = secretEnvModel{Name: types.StringValue(r.Name), Secret: types.StringValue(r.Secret), Key: types.StringValue(r.Key)}
	}
	return types.ListValueFrom(ctx, secretEnvType, out)
}

// secretFilesState maps the API's secret_files back; an empty path (the default directory)
// is null.
func secretFilesState(ctx context.Context, refs []api.SecretFile, prior types.List) (types.List, diag.Diagnostics) {
	if len(refs) == 0 && (prior.IsNull() || prior.IsUnknown()) {
		return types.ListNull(secretFileType), nil
	}
	out := make([]secretFileModel, len(refs))
	for i, r := range refs {
		out[i] = secretFileModel{Secret: types.StringValue(r.Secret), Path: stringOrNull(r.Path)}
	}
	return types.ListValueFrom(ctx, secretFileType, out)
}
