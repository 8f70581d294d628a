package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"reflect"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/mapvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/resourcevalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
)

const defaultWaitTimeoutSec = 300

var (
	_ resource.ResourceWithModifyPlan       = (*jobResource)(nil)
	_ resource.ResourceWithConfigValidators = (*jobResource)(nil)
	_ resource.ResourceWithValidateConfig   = (*jobResource)(nil)
)

// NewJobResource is the sless_job resource.
func NewJobResource() resource.Resource {
	return &jobResource{newResourceBase(jobRemote, jobModelFrom)}
}

type jobResource struct {
	resourceBase[jobModel, api.Job]
}

type jobModel struct {
	objectRef
	Function       types.String `tfsdk:"function"`
	Runtime        types.String `tfsdk:"runtime"`
	Image          types.String `tfsdk:"image"`
	Entrypoint     types.String `tfsdk:"entrypoint"`
	EnvVars        types.Map    `tfsdk:"env_vars"`
	MemoryMB       types.Int64  `tfsdk:"memory_mb"`
	TimeoutSec     types.Int64  `tfsdk:"timeout_sec"`
	EventJSON      types.String `tfsdk:"event_json"`
	RunID          types.Int64  `tfsdk:"run_id"`
	WaitTimeoutSec types.Int64  `tfsdk:"wait_timeout_sec"`
	codeSource
	jobResult
}

// jobResult is the outcome of the latest run; unknown in a plan that raises run_id.
type jobResult struct {
	Phase         types.String `tfsdk:"phase"`
	ObservedRunID types.Int64  `tfsdk:"observed_run_id"`
	Result        types.String `tfsdk:"result"`
	Output        types.String `tfsdk:"output"`
	Error         types.String `tfsdk:"error"`
	DurationMs    types.Int64  `tfsdk:"duration_ms"`
}

func (r *jobResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	attrs := jobAttributes()
	maps.Copy(attrs, codeSourceAttributes("job"))
	resp.Schema = schema.Schema{
		MarkdownDescription: "A one-off run of a function with a JSON event. `run_id = 0` creates the job without running it; " +
			"raising `run_id` runs it again and `apply` waits for the run to end (`wait_timeout_sec`). " +
			"The job runs an existing `function`, or is self-contained: `runtime` with its own code (`source_dir`, or " +
			"`code_path` + `code_hash`), built like a function's, or with a prebuilt `image`.",
		Attributes: attrs,
	}
}

func jobAttributes() map[string]schema.Attribute {
	attrs := objectAttributes("Job name, a DNS label. Changing it replaces the job.", "Tenant namespace.")
	maps.Copy(attrs, map[string]schema.Attribute{
		"function": schema.StringAttribute{
			Optional: true, MarkdownDescription: "Function to run; the job waits for it to be Ready.",
			Validators: nameValidators(),
		},
		"runtime": schema.StringAttribute{
			Optional: true, MarkdownDescription: "Self-contained job: the runtime its code (`source_dir` or `code_path`) is built for, or of `image`; one of " + quotedList(api.Runtimes) + ".",
			Validators: runtimeValidators(),
		},
		"image": schema.StringAttribute{
			Optional: true, MarkdownDescription: "Self-contained job: prebuilt image to run instead of uploaded code (cluster installs only; `sless dev` builds uploaded code).",
			Validators: []validator.String{stringvalidator.LengthAtMost(rules.MaxImageLength)},
		},
		"entrypoint": schema.StringAttribute{Optional: true, MarkdownDescription: "Handler entry point (the function's when unset)."},
		"env_vars": schema.MapAttribute{
			ElementType: types.StringType, Optional: true, MarkdownDescription: "Extra environment variables of the run.",
			Validators: []validator.Map{envCheck{}, mapvalidator.SizeAtMost(rules.MaxEnvVars)},
		},
		"memory_mb": schema.Int64Attribute{
			Optional: true, MarkdownDescription: fmt.Sprintf("Memory limit in MiB (%d-%d; the function's when unset).", rules.MinMemoryMB, rules.MaxMemoryMB),
			Validators: []validator.Int64{int64validator.Between(rules.MinMemoryMB, rules.MaxMemoryMB)},
		},
		"timeout_sec": schema.Int64Attribute{
			Optional: true, MarkdownDescription: fmt.Sprintf("Limit of the run in seconds, 1-%d; `0` or unset means no limit.", rules.MaxTimeoutSeconds),
			Validators: timeoutValidators(),
		},
		"event_json": schema.StringAttribute{
			Optional: true, MarkdownDescription: "Event passed to the handler, as JSON (e.g. `jsonencode({...})`).",
			Validators: []validator.String{stringCheck{desc: "event JSON", check: checkJSON}},
		},
		"run_id": schema.Int64Attribute{
			Optional: true, Computed: true, Default: int64default.StaticInt64(0),
			MarkdownDescription: "`0` creates the job without running it; each higher value runs it again (in place). Lowering it replaces the job.",
			Validators:          []validator.Int64{int64validator.AtLeast(0)},
			PlanModifiers: []planmodifier.Int64{int64planmodifier.RequiresReplaceIf(func(_ context.Context, req planmodifier.Int64Request, resp *int64planmodifier.RequiresReplaceIfFuncResponse) {
				resp.RequiresReplace = !req.StateValue.IsNull() && req.PlanValue.ValueInt64() < req.StateValue.ValueInt64()
			}, "Lowering run_id replaces the job.", "Lowering `run_id` replaces the job.")},
		},
		"wait_timeout_sec": applyWaitAttribute(fmt.Sprintf("How long `apply` waits for a run to end, including a build (default %d).", defaultWaitTimeoutSec), defaultWaitTimeoutSec),
		"phase":            computedString("Pending, Building, Running, Succeeded, Failed or Skipped (run_id 0)."),
		"observed_run_id":  computedInt64("`run_id` the status describes."),
		"result":           computedString("What the handler returned (JSON, or the string it returned)."),
		"output":           computedString("Tail of the run's stdout and stderr."),
		"error":            computedString("Why the run failed."),
		"duration_ms":      computedInt64("Run time in milliseconds."),
	})
	return attrs
}

func (r *jobResource) ConfigValidators(context.Context) []resource.ConfigValidator {
	return []resource.ConfigValidator{
		resourcevalidator.ExactlyOneOf(path.MatchRoot("function"), path.MatchRoot("runtime")),
	}
}

// ValidateConfig checks that a job either runs a function or brings exactly one kind of code.
func (r *jobResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	validateConfig(ctx, req, resp, checkJobCode)
}

// checkJobCode: a function job takes no code or image; a self-contained one needs exactly
// one of source_dir, code_path and image.
func checkJobCode(m jobModel) diag.Diagnostics {
	var diags diag.Diagnostics
	given := map[string]bool{"source_dir": !m.SourceDir.IsNull(), "code_path": !m.CodePath.IsNull(), "image": !m.Image.IsNull()}
	var set []string
	for _, attr := range []string{"source_dir", "code_path", "image"} {
		if given[attr] {
			set = append(set, attr)
		}
	}
	switch {
	case !m.Function.IsNull() && len(set) > 0:
		diags.AddAttributeError(path.Root(set[0]), "Code on a job that runs a function",
			fmt.Sprintf("The job runs function %s, which has its own code; remove %s, or remove function and set runtime for a self-contained job.", m.Function.ValueString(), set[0]))
	case !m.Runtime.IsNull() && len(set) == 0 && !m.SourceDir.IsUnknown() && !m.CodePath.IsUnknown() && !m.Image.IsUnknown():
		diags.AddAttributeError(path.Root("runtime"), "Self-contained job without code",
			"A job with runtime needs its code: set source_dir, or code_path with code_hash (or image on a cluster install).")
	case len(set) > 1:
		diags.AddAttributeError(path.Root(set[1]), "More than one kind of code",
			fmt.Sprintf("Set one of source_dir, code_path and image; %s and %s are both set.", set[0], set[1]))
	}
	return diags
}

// ModifyPlan hashes the job's own code, and marks the run's outcome unknown when run_id
// changes: the apply runs it again.
func (r *jobResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	var state jobModel
	plan, ok := planCode[jobModel](ctx, req, &state, &resp.Diagnostics)
	if !ok {
		return
	}
	if !req.State.Raw.IsNull() && !plan.RunID.Equal(state.RunID) {
		plan.jobResult = jobResult{
			Phase: types.StringUnknown(), ObservedRunID: types.Int64Unknown(), Result: types.StringUnknown(),
			Output: types.StringUnknown(), Error: types.StringUnknown(), DurationMs: types.Int64Unknown(),
		}
	}
	resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
}

// fields is the API request for m: every configurable field, so an update also clears what
// was removed from the configuration.
func (m jobModel) fields(ctx context.Context) (api.JobFields, diag.Diagnostics) {
	env, diags := envVars(ctx, m.EnvVars)
	memory := int32(m.MemoryMB.ValueInt64())
	runID := m.RunID.ValueInt64()
	var event *json.RawMessage
	if !m.EventJSON.IsNull() {
		raw := json.RawMessage(m.EventJSON.ValueString())
		event = &raw
	}
	return api.JobFields{
		Function:   clearingString(m.Function),
		Runtime:    clearingString(m.Runtime),
		Image:      clearingString(m.Image),
		Entrypoint: clearingString(m.Entrypoint),
		EnvVars:    env,
		MemoryMB:   &memory,
		TimeoutSec: timeoutSeconds(m.TimeoutSec),
		Event:      event,
		RunID:      &runID,
	}, diags
}

// jobModelFrom is prior updated with what the API reports about j.
func jobModelFrom(ctx context.Context, j api.Job, prior jobModel) (jobModel, diag.Diagnostics) {
	env, diags := envState(ctx, j.EnvVars, prior.EnvVars)
	m := prior
	m.objectRef = objectRefOf(j.Namespace, j.Name)
	m.Function = stringOrNull(j.Function)
	m.Runtime = stringOrNull(j.Runtime)
	m.Image = stringOrNull(j.Image)
	m.Entrypoint = stringOrNull(j.Entrypoint)
	m.EnvVars = env
	m.MemoryMB = types.Int64Null()
	if j.MemoryMB != 0 {
		m.MemoryMB = types.Int64Value(int64(j.MemoryMB))
	}
	m.TimeoutSec = timeoutState(j.TimeoutSec, prior.TimeoutSec)
	m.EventJSON = eventState(j.Event, prior.EventJSON)
	m.RunID = types.Int64Value(j.RunID)
	m.WaitTimeoutSec = int64OrDefault(m.WaitTimeoutSec, defaultWaitTimeoutSec)
	m.codeSource = m.forState()
	m.jobResult = jobResult{
		Phase:         types.StringValue(j.Status.Phase),
		ObservedRunID: types.Int64Value(j.Status.ObservedRunID),
		Result:        types.StringValue(j.Status.Result),
		Output:        types.StringValue(j.Status.Output),
		Error:         types.StringValue(j.Status.Error),
		DurationMs:    types.Int64Value(j.Status.DurationMs),
	}
	return m, diags
}

// eventState keeps the configured JSON text when the API's event means the same (the server
// may re-encode it), so formatting never shows as a change.
func eventState(event json.RawMessage, prior types.String) types.String {
	if len(event) == 0 || string(event) == "null" {
		if !prior.IsNull() && !prior.IsUnknown() && (prior.ValueString() == "null" || prior.ValueString() == "") {
			return prior
		}
		return types.StringNull()
	}
	if !prior.IsNull() && !prior.IsUnknown() && sameJSON(event, []byte(prior.ValueString())) {
		return prior
	}
	return types.StringValue(string(event))
}

func sameJSON(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

func (r *jobResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	withRequest(ctx, "sless_job.create", r.client, req.Plan, nil, &resp.Diagnostics, func(ctx context.Context, plan, _ jobModel, fields api.JobFields) {
		name := plan.Name.ValueString()
		runID := *fields.RunID
		if plan.has() {
			// Created without a run: the run starts once the code is there (below).
			*fields.RunID = 0
		}
		j, err := r.client.CreateJob(ctx, r.client.namespace, api.CreateJob{Name: name, JobFields: fields})
		if err != nil {
			createFailed(&resp.Diagnostics, r.client, "job", name, err)
			return
		}
		r.record(ctx, j, plan, &resp.State, &resp.Diagnostics)
		if plan.has() {
			if !r.uploadCode(ctx, plan, &resp.Diagnostics) {
				return
			}
			if _, err := r.client.UpdateJob(ctx, r.client.namespace, name, api.JobFields{RunID: &runID}); err != nil {
				resp.Diagnostics.AddError(fmt.Sprintf("Cannot start run %d of job %s", runID, name), err.Error())
				return
			}
		}
		r.waitRun(ctx, plan, &resp.State, &resp.Diagnostics)
	})
}

// uploadCode uploads a self-contained job's code.
func (r *jobResource) uploadCode(ctx context.Context, plan jobModel, diags *diag.Diagnostics) bool {
	name := plan.Name.ValueString()
	return plan.upload(ctx, "job", name, func(zip io.Reader) error {
		_, err := r.client.UploadJobSource(ctx, r.client.namespace, name, zip)
		return err
	}, diags)
}

// waitRun waits for the planned run to end and records it; a failed run is an error with the
// run recorded. After an update the next plan does not repeat it unless run_id is raised;
// after a create Terraform marks the job tainted, so the next apply creates and runs it anew.
func (r *jobResource) waitRun(ctx context.Context, plan jobModel, st *tfsdk.State, diags *diag.Diagnostics) {
	name, runID := plan.Name.ValueString(), plan.RunID.ValueInt64()
	j, err := waitJob(ctx, r.client, name, runID, time.Duration(plan.WaitTimeoutSec.ValueInt64())*time.Second)
	if err != nil {
		diags.AddError(fmt.Sprintf("Run %d of job %s did not finish", runID, name), err.Error())
		return
	}
	r.record(ctx, j, plan, st, diags)
	if j.Status.Phase == api.JobFailed {
		diags.AddError(fmt.Sprintf("Run %d of job %s failed", runID, name), j.Status.Error+"\n\nOutput:\n"+j.Status.Output)
	}
}

// Update changes the job in place; a raised run_id runs it again and waits for that run.
func (r *jobResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	withRequest(ctx, "sless_job.update", r.client, req.Plan, &req.State, &resp.Diagnostics, func(ctx context.Context, plan, state jobModel, fields api.JobFields) {
		name := plan.Name.ValueString()
		// New code goes first, so that a raised run_id runs it.
		if plan.has() && !plan.SourceHash.Equal(state.SourceHash) && !r.uploadCode(ctx, plan, &resp.Diagnostics) {
			return
		}
		j, err := r.client.UpdateJob(ctx, r.client.namespace, name, fields)
		if err != nil {
			resp.Diagnostics.AddError("Cannot update job "+name, err.Error())
			return
		}
		if plan.RunID.Equal(state.RunID) {
			// No new run: the planned outcome is the recorded one.
			m, d := jobModelFrom(ctx, j, plan)
			m.jobResult = state.jobResult
			resp.Diagnostics.Append(d...)
			resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
			return
		}
		r.waitRun(ctx, plan, &resp.State, &resp.Diagnostics)
	})
}
