package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/mapvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/resourcevalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/client"
	"sless.dev/sless/rules"
)

// defaultBuildTimeoutSec bounds the wait for a build when build_timeout_sec is not set.
const defaultBuildTimeoutSec = 600

var (
	_ resource.ResourceWithModifyPlan       = (*functionResource)(nil)
	_ resource.ResourceWithConfigValidators = (*functionResource)(nil)
)

// NewFunctionResource is the sless_function resource.
func NewFunctionResource() resource.Resource {
	return &functionResource{newResourceBase(functionRemote, functionModelFrom)}
}

type functionResource struct {
	resourceBase[functionModel, api.Function]
}

type functionModel struct {
	objectRef
	functionSettings
	codeSource
	BuildTimeoutSec types.Int64 `tfsdk:"build_timeout_sec"`
	functionStatus
}

func (r *functionResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	attrs := functionAttributes()
	maps.Copy(attrs, codeSourceAttributes("function"))
	maps.Copy(attrs, secretRefAttributes())
	resp.Schema = schema.Schema{
		MarkdownDescription: "A function: source code the platform builds for a runtime and serves over HTTP at `url`, " +
			"scaled to zero when idle. `apply` uploads the code, waits until the build is Ready and fails with the " +
			"compiler output when the build fails. Give the code as `source_dir` (zipped by the provider; any file change " +
			"shows in the plan) or as a prepared zip in `code_path` with `code_hash`.",
		Attributes: attrs,
	}
}

func functionAttributes() map[string]schema.Attribute {
	attrs := objectAttributes("Function name, a DNS label (lowercase letters, digits, `-`). Changing it replaces the function.",
		"Tenant namespace the function lives in (derived from the token).")
	maps.Copy(attrs, map[string]schema.Attribute{
		"runtime": schema.StringAttribute{
			Required: true, MarkdownDescription: "Language runtime: one of " + quotedList(api.Runtimes) + ".",
			Validators: runtimeValidators(),
		},
		"entrypoint": schema.StringAttribute{
			Optional: true, MarkdownDescription: "Handler entry point, e.g. `handler.handle` (runtime default when unset).",
		},
		"env_vars": schema.MapAttribute{
			ElementType: types.StringType, Optional: true,
			MarkdownDescription: "Environment variables of the handler; names must not start with `SLESS_` nor be one the platform or the runtime sets (" + quotedList(rules.ReservedEnvNames) + "). Changes apply in place without a rebuild.",
			Validators:          []validator.Map{envCheck{}, mapvalidator.SizeAtMost(rules.MaxEnvVars)},
		},
		"memory_mb": serverDefaultInt64(fmt.Sprintf("Memory limit in MiB (%d-%d; server default %d).", rules.MinMemoryMB, rules.MaxMemoryMB, rules.DefaultMemoryMB), rules.MinMemoryMB, rules.MaxMemoryMB),
		"timeout_sec": schema.Int64Attribute{
			Optional: true, MarkdownDescription: fmt.Sprintf("Limit of one invocation in seconds, 1-%d; `0` or unset means no limit (unset stays null in the state).", rules.MaxTimeoutSeconds),
			Validators: timeoutValidators(),
		},
		"min_replicas":          serverDefaultInt64("Instances kept running when idle; 0 (default) scales to zero, 1 or more keeps the function always on.", 0, rules.MaxReplicas),
		"max_replicas":          serverDefaultInt64(fmt.Sprintf("Upper bound of instances (1-%d; server default %d).", rules.MaxReplicas, rules.DefaultMaxReplicas), 1, rules.MaxReplicas),
		"scale_down_period_sec": serverDefaultInt64(fmt.Sprintf("Idle seconds before scaling down (%d-%d; server default %d).", rules.MinScaleDownSeconds, rules.MaxScaleDownSeconds, rules.DefaultScaleDownSeconds), rules.MinScaleDownSeconds, rules.MaxScaleDownSeconds),
		"scaling_metric": schema.StringAttribute{
			Optional: true, Computed: true, MarkdownDescription: "`concurrency` (default: in-flight requests per instance) or `requestRate`.",
			Validators:    []validator.String{stringvalidator.OneOf(rules.MetricConcurrency, rules.MetricRequestRate)},
			PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
		},
		"stream_idle_timeout_sec": serverDefaultInt64(fmt.Sprintf("Seconds a streamed answer (chunked, SSE) may send nothing, or a WebSocket pass no byte either way, before the gateway ends it cleanly: an event stream with a final comment, a WebSocket with a close frame (1001); `timeout_sec` bounds its whole length (%d-%d; server default %d).", rules.MinStreamIdleSeconds, rules.MaxStreamIdleSeconds, rules.DefaultStreamIdleSeconds), rules.MinStreamIdleSeconds, rules.MaxStreamIdleSeconds),
		"scaling_target":          serverDefaultInt64(fmt.Sprintf("Target value of `scaling_metric` per instance, e.g. the concurrency target (1-%d; server default %d).", rules.MaxScalingTarget, rules.DefaultScalingTarget), 1, rules.MaxScalingTarget),
		"async_enabled": schema.BoolAttribute{
			Optional: true, Computed: true, Default: booldefault.StaticBool(false),
			MarkdownDescription: "Take asynchronous invocations: a call with `Prefer: respond-async` is queued and answered `202` with the invocation's `Location` (default false).",
		},
		"async_max_attempts": serverDefaultInt64(fmt.Sprintf("Attempts of one asynchronous invocation before it is dead-lettered (1-%d; server default %d).", rules.MaxAttempts, rules.DefaultMaxAttempts), 1, rules.MaxAttempts),
		"async_backoff_ms":   serverDefaultInt64(fmt.Sprintf("Delay before the second attempt in ms, doubling for each next one (0-%d; server default %d).", rules.MaxBackoffMillis, rules.DefaultBackoffMillis), 0, rules.MaxBackoffMillis),
		"async_dead_letter_queue": schema.StringAttribute{
			Optional: true, MarkdownDescription: "Queue exhausted asynchronous invocations go to, named `<namespace>.<name>`; `<namespace>.async.<name>.dlq` when unset.",
			Validators: []validator.String{stringvalidator.LengthBetween(1, rules.MaxQueueLength)},
		},
		"async_max_jobs":    serverDefaultInt64(fmt.Sprintf("Dispatcher Jobs that may drain the function's asynchronous queue at once in a cluster (1-%d; server default %d); `sless dev` keeps the value but runs one runner per function.", rules.MaxAsyncJobs, rules.DefaultAsyncJobs), 1, rules.MaxAsyncJobs),
		"build_timeout_sec": applyWaitAttribute(fmt.Sprintf("How long `apply` waits for the build to become Ready (default %d); time the operator holds the build back for a slot (`--max-concurrent-builds`) is not counted.", defaultBuildTimeoutSec), defaultBuildTimeoutSec),
		"url":               computedString("URL that invokes the function (`<endpoint>/fn/<namespace>/<name>`)."),
		"image":             computedString("Built image (or local artifact under `sless dev`)."),
		"phase":             computedString("Pending, Building, Ready or Failed."),
		"traffic":           trafficAttribute(),
		"rollout":           rolloutAttribute(),
		"revision_history_limit": serverDefaultInt64(fmt.Sprintf("Revisions kept without traffic or a tag; older ones are deleted (1-%d; server default %d).",
			rules.MaxRevisionHistoryLimit, rules.DefaultRevisionHistoryLimit), 1, rules.MaxRevisionHistoryLimit),
		"latest_created_revision": computedString("The newest revision, `<name>-<n>`: each change to what runs (code, runtime, entrypoint, env, secrets, memory, timeout) makes one."),
		"latest_ready_revision":   computedString("The newest revision that can serve: what `latest = true` in `traffic` sends calls to."),
	})
	return attrs
}

func (r *functionResource) ConfigValidators(context.Context) []resource.ConfigValidator {
	return []resource.ConfigValidator{
		resourcevalidator.ExactlyOneOf(path.MatchRoot("source_dir"), path.MatchRoot("code_path")),
	}
}

// ModifyPlan hashes source_dir so that an edit of any file in it is a planned change, and
// marks what a rebuild or restart may change as unknown.
func (r *functionResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	plan, ok := planCode[functionModel](ctx, req, nil, &resp.Diagnostics)
	if !ok {
		return
	}
	resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
	if resp.Diagnostics.HasError() || req.State.Raw.IsNull() || resp.Plan.Raw.Equal(req.State.Raw) {
		return
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("image"), types.StringUnknown())...)
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("phase"), types.StringUnknown())...)
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("latest_created_revision"), types.StringUnknown())...)
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("latest_ready_revision"), types.StringUnknown())...)
}

func (r *functionResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	withRequest(ctx, "sless_function.create", r.client, req.Plan, nil, &resp.Diagnostics, func(ctx context.Context, plan, _ functionModel, fields api.FunctionFields) {
		name := plan.Name.ValueString()
		fn, err := r.client.CreateFunction(ctx, r.client.namespace, api.CreateFunction{Name: name, FunctionFields: fields})
		if err != nil {
			createFailed(&resp.Diagnostics, r.client, "function", name, err)
			return
		}
		// Recorded before the upload and build: if they fail, Terraform knows the function
		// exists (tainted) and replaces it on the next apply instead of failing on a conflict.
		r.record(ctx, fn, plan, &resp.State, &resp.Diagnostics)
		r.deploy(ctx, plan, &resp.State, &resp.Diagnostics)
	})
}

func (r *functionResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	withRequest(ctx, "sless_function.update", r.client, req.Plan, &req.State, &resp.Diagnostics, func(ctx context.Context, plan, state functionModel, fields api.FunctionFields) {
		name := plan.Name.ValueString()
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
	})
}

// deploy uploads the planned code, waits for the build and records the result. When the
// upload or build fails the state keeps the previous source_hash, so the next plan retries.
func (r *functionResource) deploy(ctx context.Context, plan functionModel, st *tfsdk.State, diags *diag.Diagnostics) {
	name := plan.Name.ValueString()
	var fn api.Function
	uploaded := plan.upload(ctx, "function", name, func(zip io.Reader) (err error) {
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
		var be *client.BuildError
		if errors.As(err, &be) {
			diags.AddError("Function "+name+" failed to build", be.Output)
		} else {
			diags.AddError("Function "+name+" is not ready", err.Error())
		}
		return
	}
	r.record(ctx, fn, plan, st, diags)
}

// functionModelFrom is prior updated with what the API reports about fn.
func functionModelFrom(ctx context.Context, fn api.Function, prior functionModel) (functionModel, diag.Diagnostics) {
	settings, diags := functionSettingsFrom(ctx, fn, prior.functionSettings)
	m := prior
	m.objectRef = objectRefOf(fn.Namespace, fn.Name)
	m.functionSettings = settings
	m.functionStatus = functionStatusFrom(fn)
	m.BuildTimeoutSec = int64OrDefault(m.BuildTimeoutSec, defaultBuildTimeoutSec)
	m.codeSource = m.forState()
	return m, diags
}
