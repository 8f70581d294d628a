package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/mapvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/resourcevalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/client"
)

// defaultBuildTimeoutSec bounds the wait for a build when build_timeout_sec is not set.
const defaultBuildTimeoutSec = 600

var (
	_ resource.ResourceWithImportState      = (*functionResource)(nil)
	_ resource.ResourceWithModifyPlan       = (*functionResource)(nil)
	_ resource.ResourceWithConfigValidators = (*functionResource)(nil)
)

// NewFunctionResource is the sless_function resource.
func NewFunctionResource() resource.Resource { return &functionResource{} }

type functionResource struct {
	client *apiClient
}

type functionModel struct {
	ID        types.String `tfsdk:"id"`
	Name      types.String `tfsdk:"name"`
	Namespace types.String `tfsdk:"namespace"`
	functionSettings
	codeSource
	BuildTimeoutSec types.Int64 `tfsdk:"build_timeout_sec"`
	functionStatus
}

func (r *functionResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_function"
}

func (r *functionResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	attrs := functionAttributes()
	maps.Copy(attrs, codeSourceAttributes("function"))
	resp.Schema = schema.Schema{
		MarkdownDescription: "A function: source code the platform builds for a runtime and serves over HTTP at `url`, " +
			"scaled to zero when idle. `apply` uploads the code, waits until the build is Ready and fails with the " +
			"compiler output when the build fails. Give the code as `source_dir` (zipped by the provider; any file change " +
			"shows in the plan) or as a prepared zip in `code_path` with `code_hash`.",
		Attributes: attrs,
	}
}

func functionAttributes() map[string]schema.Attribute {
	keep := []planmodifier.Int64{int64planmodifier.UseStateForUnknown()}
	attrs := map[string]schema.Attribute{
		"id": schema.StringAttribute{
			Computed: true, MarkdownDescription: "`namespace/name`.",
			PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
		},
		"name": schema.StringAttribute{
			Required: true, MarkdownDescription: "Function name, a DNS label (lowercase letters, digits, `-`). Changing it replaces the function.",
			Validators:    nameValidators(),
			PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
		},
		"namespace": schema.StringAttribute{
			Computed: true, MarkdownDescription: "Tenant namespace the function lives in (derived from the token).",
			PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
		},
		"runtime": schema.StringAttribute{
			Required: true, MarkdownDescription: "Language runtime: one of " + quotedList(api.Runtimes) + ".",
			Validators: runtimeValidators(),
		},
		"entrypoint": schema.StringAttribute{
			Optional: true, MarkdownDescription: "Handler entry point, e.g. `handler.handle` (runtime default when unset).",
		},
		"env_vars": schema.MapAttribute{
			ElementType: types.StringType, Optional: true,
			MarkdownDescription: "Environment variables of the handler; names must not start with `SLESS_`. Changes apply in place without a rebuild.",
			Validators:          []validator.Map{envCheck{}, mapvalidator.SizeAtMost(256)},
		},
		"memory_mb": schema.Int64Attribute{
			Optional: true, Computed: true, MarkdownDescription: "Memory limit in MiB (32-16384; server default 128).",
			Validators: []validator.Int64{int64validator.Between(32, 16384)}, PlanModifiers: keep,
		},
		"timeout_sec": schema.Int64Attribute{
			Optional: true, MarkdownDescription: "Limit of one invocation in seconds, 1-900; `0` or unset means no limit (unset stays null in the state).",
			Validators: timeoutValidators(),
		},
		"min_replicas": schema.Int64Attribute{
			Optional: true, Computed: true, MarkdownDescription: "Instances kept running when idle; 0 (default) scales to zero, 1 or more keeps the function always on.",
			Validators: []validator.Int64{int64validator.Between(0, 1000)}, PlanModifiers: keep,
		},
		"max_replicas": schema.Int64Attribute{
			Optional: true, Computed: true, MarkdownDescription: "Upper bound of instances (1-1000; server default 10).",
			Validators: []validator.Int64{int64validator.Between(1, 1000)}, PlanModifiers: keep,
		},
		"scale_down_period_sec": schema.Int64Attribute{
			Optional: true, Computed: true, MarkdownDescription: "Idle seconds before scaling down (1-86400; server default 300).",
			Validators: []validator.Int64{int64validator.Between(1, 86400)}, PlanModifiers: keep,
		},
		"scaling_metric": schema.StringAttribute{
			Optional: true, Computed: true, MarkdownDescription: "`concurrency` (default: in-flight requests per instance) or `requestRate`.",
			Validators:    []validator.String{stringvalidator.OneOf("concurrency", "requestRate")},
			PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
		},
		"scaling_target": schema.Int64Attribute{
			Optional: true, Computed: true, MarkdownDescription: "Target value of `scaling_metric` per instance, e.g. the concurrency target (1-100000; server default 100).",
			Validators: []validator.Int64{int64validator.Between(1, 100000)}, PlanModifiers: keep,
		},
		"async_enabled": schema.BoolAttribute{
			Optional: true, Computed: true, Default: booldefault.StaticBool(false),
			MarkdownDescription: "Take asynchronous invocations: a call with `Prefer: respond-async` is queued and answered `202` with the invocation's `Location` (default false).",
		},
		"async_max_attempts": schema.Int64Attribute{
			Optional: true, Computed: true, MarkdownDescription: "Attempts of one asynchronous invocation before it is dead-lettered (1-100; server default 3).",
			Validators: []validator.Int64{int64validator.Between(1, 100)}, PlanModifiers: keep,
		},
		"async_backoff_ms": schema.Int64Attribute{
			Optional: true, Computed: true, MarkdownDescription: "Delay before the second attempt in ms, doubling for each next one (0-3600000; server default 1000).",
			Validators: []validator.Int64{int64validator.Between(0, 3600000)}, PlanModifiers: keep,
		},
		"async_dead_letter_queue": schema.StringAttribute{
			Optional: true, MarkdownDescription: "Queue exhausted asynchronous invocations go to; `<namespace>.async.<name>.dlq` when unset.",
			Validators: []validator.String{stringvalidator.LengthBetween(1, 255)},
		},
		"build_timeout_sec": schema.Int64Attribute{
			Optional: true, Computed: true, Default: int64default.StaticInt64(defaultBuildTimeoutSec),
			MarkdownDescription: fmt.Sprintf("How long `apply` waits for the build to become Ready (default %d).", defaultBuildTimeoutSec),
			Validators:          []validator.Int64{int64validator.Between(1, 86400)},
		},
		"url": schema.StringAttribute{
			Computed: true, MarkdownDescription: "URL that invokes the function (`<endpoint>/fn/<namespace>/<name>`).",
			PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
		},
		"image": schema.StringAttribute{
			Computed: true, MarkdownDescription: "Built image (or local artifact under `sless dev`).",
			PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
		},
		"phase": schema.StringAttribute{
			Computed: true, MarkdownDescription: "Pending, Building, Ready or Failed.",
			PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
		},
	}
	return attrs
}

func (r *functionResource) ConfigValidators(context.Context) []resource.ConfigValidator {
	return []resource.ConfigValidator{
		resourcevalidator.ExactlyOneOf(path.MatchRoot("source_dir"), path.MatchRoot("code_path")),
	}
}

func (r *functionResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	c, ok := clientFrom(req.ProviderData)
	if !ok {
		resp.Diagnostics.AddError("Unexpected provider data", fmt.Sprintf("got %T; this is a bug in the provider", req.ProviderData))
		return
	}
	r.client = c
}

// ModifyPlan hashes source_dir so that an edit of any file in it is a planned change, and
// marks what a rebuild or restart may change as unknown.
func (r *functionResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return
	}
	var plan functionModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	plan.SourceHash = plan.plannedHash(&resp.Diagnostics)
	resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
	if resp.Diagnostics.HasError() || req.State.Raw.IsNull() || resp.Plan.Raw.Equal(req.State.Raw) {
		return
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("image"), types.StringUnknown())...)
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("phase"), types.StringUnknown())...)
}

func (r *functionResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	ctx, end := startSpan(ctx, "sless_function.create")
	defer end(&resp.Diagnostics)
	plan, ok := loadModel[functionModel](ctx, r.client, req.Plan.Get, &resp.Diagnostics)
	if !ok {
		return
	}
	name := plan.Name.ValueString()
	fields, diags := plan.fields(ctx)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	fn, err := r.client.CreateFunction(ctx, r.client.namespace, api.CreateFunction{Name: name, FunctionFields: fields})
	if err != nil {
		if client.IsConflict(err) {
			resp.Diagnostics.AddError("Function already exists",
				fmt.Sprintf("Function %s exists in namespace %s; adopt it with `terraform import <address> %s` or pick another name.", name, r.client.namespace, name))
			return
		}
		resp.Diagnostics.AddError("Cannot create function "+name, err.Error())
		return
	}
	// Recorded before the upload and build: if they fail, Terraform knows the function
	// exists (tainted) and replaces it on the next apply instead of failing on a conflict.
	resp.Diagnostics.Append(r.setState(ctx, &resp.State, plan, fn)...)
	r.deploy(ctx, plan, &resp.State, &resp.Diagnostics)
}

func (r *functionResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	ctx, end := startSpan(ctx, "sless_function.update")
	defer end(&resp.Diagnostics)
	if !r.client.configured(&resp.Diagnostics) {
		return
	}
	var plan, state functionModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name := plan.Name.ValueString()
	fields, diags := plan.fields(ctx)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	fn, err := r.client.UpdateFunction(ctx, r.client.namespace, name, fields)
	if err != nil {
		resp.Diagnostics.AddError("Cannot update function "+name, err.Error())
		return
	}
	if plan.SourceHash.Equal(state.SourceHash) {
		r.waitAndRecord(ctx, plan, fn.Status, &resp.State, &resp.Diagnostics)
		return
	}
	r.deploy(ctx, plan, &resp.State, &resp.Diagnostics)
}

// deploy uploads the planned code, waits for the build and records the result. When the
// upload or build fails the state keeps the previous source_hash, so the next plan retries.
func (r *functionResource) deploy(ctx context.Context, plan functionModel, st *tfsdk.State, diags *diag.Diagnostics) {
	name := plan.Name.ValueString()
	tflog.Info(ctx, "uploading function source", map[string]any{"function": name, "source_hash": plan.SourceHash.ValueString()})
	var fn api.Function
	uploaded := plan.upload(func(zip io.Reader) (err error) {
		fn, err = r.client.UploadSource(ctx, r.client.namespace, name, zip)
		return err
	}, diags)
	if uploaded {
		r.waitAndRecord(ctx, plan, fn.Status, st, diags)
	}
}

// waitAndRecord waits for Ready and writes the state; a failed build is the diagnostic.
func (r *functionResource) waitAndRecord(ctx context.Context, plan functionModel, prev api.FunctionStatus, st *tfsdk.State, diags *diag.Diagnostics) {
	name := plan.Name.ValueString()
	timeout := time.Duration(plan.BuildTimeoutSec.ValueInt64()) * time.Second
	fn, err := waitFunctionReady(ctx, r.client, name, prev, timeout)
	if err != nil {
		var be *BuildError
		if errors.As(err, &be) {
			diags.AddError("Function "+name+" failed to build", be.Output)
		} else {
			diags.AddError("Function "+name+" is not ready", err.Error())
		}
		return
	}
	diags.Append(r.setState(ctx, st, plan, fn)...)
}

func (r *functionResource) setState(ctx context.Context, st *tfsdk.State, plan functionModel, fn api.Function) diag.Diagnostics {
	m, diags := functionModelFrom(ctx, fn, plan)
	return append(diags, st.Set(ctx, &m)...)
}

// functionModelFrom is prior updated with what the API reports about fn.
func functionModelFrom(ctx context.Context, fn api.Function, prior functionModel) (functionModel, diag.Diagnostics) {
	settings, diags := functionSettingsFrom(ctx, fn, prior.functionSettings)
	m := prior
	m.ID = objectID(fn.Namespace, fn.Name)
	m.Name = types.StringValue(fn.Name)
	m.Namespace = types.StringValue(fn.Namespace)
	m.functionSettings = settings
	m.functionStatus = functionStatusFrom(fn)
	if m.BuildTimeoutSec.IsNull() || m.BuildTimeoutSec.IsUnknown() {
		m.BuildTimeoutSec = types.Int64Value(defaultBuildTimeoutSec)
	}
	if m.SourceHash.IsUnknown() {
		m.SourceHash = types.StringNull()
	}
	return m, diags
}

func (r *functionResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	readResource(ctx, r.client, functionRemote, req, resp, func(ctx context.Context, state functionModel, obj api.Function) {
		resp.Diagnostics.Append(r.setState(ctx, &resp.State, state, obj)...)
	})
}

func (r *functionResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	deleteResource[functionModel](ctx, r.client, functionRemote, req, resp)
}

func (r *functionResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByName(ctx, "sless_function", r.client, req, resp)
}
