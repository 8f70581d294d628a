package provider

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/mapvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/client"
	"sless.dev/sless/rules"
)

var (
	_ resource.ResourceWithModifyPlan     = (*secretResource)(nil)
	_ resource.ResourceWithValidateConfig = (*secretResource)(nil)
)

// NewSecretResource is the sless_secret resource.
func NewSecretResource() resource.Resource {
	return &secretResource{newResourceBase(secretRemote, secretModelFrom)}
}

type secretResource struct {
	resourceBase[secretModel, api.Secret]
}

// secretModel is a secret. The API never returns a value, so data and data_base64 are what
// this configuration last wrote, and version tells whether that is still the secret's data.
type secretModel struct {
	objectRef
	Data       types.Map    `tfsdk:"data"`
	DataBase64 types.Map    `tfsdk:"data_base64"`
	Keys       types.List   `tfsdk:"keys"`
	Version    types.Int64  `tfsdk:"version"`
	CreatedAt  types.String `tfsdk:"created_at"`
	UpdatedAt  types.String `tfsdk:"updated_at"`
}

func (r *secretResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	attrs := objectAttributes("Secret name, a DNS label. Changing it replaces the secret; while functions use the old name, "+
		"give the resource `lifecycle { create_before_destroy = true }` so that they move to the new one before the old one is deleted.",
		"Tenant namespace the secret lives in (derived from the token).")
	keyCheck := stringCheck{desc: "secret key", check: rules.CheckSecretKey}
	maps.Copy(attrs, map[string]schema.Attribute{
		"data": schema.MapAttribute{
			ElementType: types.StringType, Optional: true, Sensitive: true,
			MarkdownDescription: fmt.Sprintf("Text values by key. Keys are letters, digits, `-`, `_` and `.` (they are also the file names "+
				"under `secret_files`); at most %d keys and %d KiB of keys and values with `data_base64`, which must not repeat a key. "+
				"Write-only: the API never returns a value.", rules.MaxSecretKeys, rules.MaxSecretBytes>>10),
			Validators: []validator.Map{mapvalidator.KeysAre(keyCheck), mapvalidator.SizeAtMost(rules.MaxSecretKeys)},
		},
		"data_base64": schema.MapAttribute{
			ElementType: types.StringType, Optional: true, Sensitive: true,
			MarkdownDescription: "Binary values by key, standard base64 (e.g. `filebase64(\"tls.key\")`); the function sees the decoded bytes. " +
				"Same keys and limits as `data`. Write-only.",
			Validators: []validator.Map{
				mapvalidator.KeysAre(keyCheck), mapvalidator.SizeAtMost(rules.MaxSecretKeys),
				mapvalidator.ValueStringsAre(stringCheck{desc: "base64 value", check: checkBase64}),
			},
		},
		"keys": schema.ListAttribute{
			ElementType: types.StringType, Computed: true,
			MarkdownDescription: "Keys of the secret, sorted (the names are not secret; the values are).",
		},
		"version": schema.Int64Attribute{
			Computed: true, MarkdownDescription: "Number of times the data was written: 1 at creation, +1 for each rotation.",
		},
		"created_at": computedString("When the secret was created (RFC 3339)."),
		"updated_at": schema.StringAttribute{Computed: true, MarkdownDescription: "When the data was last written (RFC 3339)."},
	})
	resp.Schema = schema.Schema{
		MarkdownDescription: "A named set of values (passwords, tokens, keys) of the tenant that functions read through `secret_env` or " +
			"`secret_files`, and event triggers through `broker_secret`.\n\n" +
			"**Values are write-only and sensitive.** The API never returns a value, so Terraform keeps the values it wrote. " +
			"`data` and `data_base64` are sensitive: plans and apply output show `(sensitive value)`. Like every sensitive " +
			"attribute they are stored in the Terraform state, so keep the state where only the people allowed to read the " +
			"secret can (an encrypted remote backend) and take the values from variables (`TF_VAR_...`) or another secret " +
			"store rather than writing them into the configuration.\n\n" +
			"**Rotation.** Changing `data` or `data_base64` replaces the whole data in place (`version` + 1); every function " +
			"that references the secret restarts with the new values. A rotation made outside Terraform (the CLI, the API) " +
			"changes `version`: the next plan then shows an update of this resource that writes the configured values back.\n\n" +
			"**Deletion** is refused while a function or an event trigger references the secret; the error names them. Refer to " +
			"the secret as `sless_secret.<label>.name` so that Terraform creates it before, and deletes it after, the functions " +
			"that use it.\n\n" +
			"**Import** brings in the name, keys and version, but no value (there is none to read): after `terraform import` " +
			"the next `apply` writes the configured values, a rotation that restarts the functions using the secret.",
		Attributes: attrs,
	}
}

// ValidateConfig checks the data as a whole at plan time: every key in one of the two maps,
// at least one key, and the API's limits. Each key and base64 value has its own validator.
func (r *secretResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	validateConfig(ctx, req, resp, checkSecretConfig)
}

func checkSecretConfig(m secretModel) diag.Diagnostics {
	var diags diag.Diagnostics
	data, ok := knownStrings(m.Data)
	data64, ok64 := knownStrings(m.DataBase64)
	if !ok || !ok64 {
		return diags // checked once the keys are known
	}
	if err := checkSecretData(data, data64); err != nil {
		diags.AddAttributeError(path.Root("data"), "Invalid secret data", err.Error())
	}
	return diags
}

// knownStrings is the map v with unknown values as "" (their keys are known); ok is false
// when v itself is unknown.
func knownStrings(v types.Map) (map[string]string, bool) {
	if v.IsUnknown() {
		return nil, false
	}
	out := map[string]string{}
	for k, e := range v.Elements() {
		if s, isString := e.(types.String); isString {
			out[k] = s.ValueString()
		}
	}
	return out, true
}

// ModifyPlan plans keys from the configured data, so that the plan shows which keys a
// rotation leaves the secret with (the values stay hidden).
func (r *secretResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return
	}
	var plan secretModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || plan.Data.IsUnknown() || plan.DataBase64.IsUnknown() {
		return
	}
	keys := slices.Sorted(maps.Keys(plan.Data.Elements()))
	for k := range plan.DataBase64.Elements() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	list, d := types.ListValueFrom(ctx, types.StringType, slices.Compact(keys))
	resp.Diagnostics.Append(d...)
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("keys"), list)...)
}

// fields is the API request for m: the secret's whole data.
func (m secretModel) fields(ctx context.Context) (api.SecretFields, diag.Diagnostics) {
	var f api.SecretFields
	var diags diag.Diagnostics
	if !m.Data.IsNull() {
		diags.Append(m.Data.ElementsAs(ctx, &f.Data, false)...)
	}
	if !m.DataBase64.IsNull() {
		diags.Append(m.DataBase64.ElementsAs(ctx, &f.DataBase64, false)...)
	}
	return f, diags
}

func (r *secretResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	withRequest(ctx, "sless_secret.create", r.client, req.Plan, nil, &resp.Diagnostics, func(ctx context.Context, plan, _ secretModel, fields api.SecretFields) {
		name := plan.Name.ValueString()
		sec, err := r.client.CreateSecret(ctx, r.client.namespace, api.CreateSecret{Name: name, SecretFields: fields})
		if err != nil {
			createFailed(&resp.Diagnostics, r.client, "secret", name, err)
			return
		}
		r.record(ctx, sec, plan, &resp.State, &resp.Diagnostics)
	})
}

// Update writes the whole new data: a rotation, which restarts the functions that use it.
func (r *secretResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	withRequest(ctx, "sless_secret.update", r.client, req.Plan, &req.State, &resp.Diagnostics, func(ctx context.Context, plan, _ secretModel, fields api.SecretFields) {
		name := plan.Name.ValueString()
		sec, err := r.client.UpdateSecret(ctx, r.client.namespace, name, fields)
		if err != nil {
			resp.Diagnostics.AddError("Cannot rotate secret "+name, err.Error())
			return
		}
		tflog.Info(ctx, "secret rotated", map[string]any{"secret": name, "version": sec.Version})
		r.record(ctx, sec, plan, &resp.State, &resp.Diagnostics)
	})
}

// Delete deletes the secret; the API refuses while something references it, and the
// diagnostic says what and how Terraform orders the deletions.
func (r *secretResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	withState(ctx, r.client, secretRemote, "delete", req.State, &resp.Diagnostics, func(ctx context.Context, _ secretModel, name string) {
		err := r.client.DeleteSecret(ctx, r.client.namespace, name)
		if client.IsConflict(err) {
			resp.Diagnostics.AddError("Secret "+name+" is still in use", secretInUseDetail(err))
			return
		}
		deleteAndWait(ctx, &resp.Diagnostics, "secret", name, func() error { return err }, func() error {
			_, err := r.client.GetSecret(ctx, r.client.namespace, name)
			return err
		})
	})
}

// secretInUseDetail explains the API's refusal to delete a referenced secret.
func secretInUseDetail(err error) string {
	msg := err.Error()
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		msg = apiErr.Message // names the functions and triggers
	}
	return msg + ".\n\nTerraform deletes a function before the secret it uses only when it knows that the function uses it: " +
		"in this configuration, refer to the secret as sless_secret.<label>.name (in secret_env, secret_files or broker_secret) " +
		"instead of writing its name. Functions and triggers managed elsewhere must drop the reference first."
}

// secretModelFrom is prior updated with what the API reports about sec. A version other
// than the prior state's means the data was replaced outside Terraform: the values the
// state holds are no longer the secret's, so they are cleared and the next plan writes the
// configured ones back. (A plan's version is unknown, so Create and Update keep the values.)
func secretModelFrom(ctx context.Context, sec api.Secret, prior secretModel) (secretModel, diag.Diagnostics) {
	m := prior
	m.objectRef = objectRefOf(sec.Namespace, sec.Name)
	keys, diags := types.ListValueFrom(ctx, types.StringType, append([]string{}, slices.Sorted(slices.Values(sec.Keys))...))
	m.Keys = keys
	if v := prior.Version; !v.IsNull() && !v.IsUnknown() && v.ValueInt64() != sec.Version {
		diags.AddWarning("Secret "+sec.Name+" was changed outside Terraform",
			fmt.Sprintf("Its data was replaced (version %d, Terraform wrote version %d); the plan writes the configured values back, a rotation that restarts the functions using it.", sec.Version, v.ValueInt64()))
		m.Data, m.DataBase64 = types.MapNull(types.StringType), types.MapNull(types.StringType)
	}
	m.Version = types.Int64Value(sec.Version)
	m.CreatedAt = types.StringValue(sec.CreatedAt.UTC().Format(time.RFC3339))
	m.UpdatedAt = types.StringValue(sec.UpdatedAt.UTC().Format(time.RFC3339))
	return m, diags
}
