package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"sless.dev/sless/gateway/api"
)

// functionSettings are the configurable attributes the sless_function resource and data
// source share.
type functionSettings struct {
	Runtime              types.String `tfsdk:"runtime"`
	Entrypoint           types.String `tfsdk:"entrypoint"`
	EnvVars              types.Map    `tfsdk:"env_vars"`
	MemoryMB             types.Int64  `tfsdk:"memory_mb"`
	TimeoutSec           types.Int64  `tfsdk:"timeout_sec"`
	MinReplicas          types.Int64  `tfsdk:"min_replicas"`
	MaxReplicas          types.Int64  `tfsdk:"max_replicas"`
	ScaleDownPeriodSec   types.Int64  `tfsdk:"scale_down_period_sec"`
	ScalingMetric        types.String `tfsdk:"scaling_metric"`
	ScalingTarget        types.Int64  `tfsdk:"scaling_target"`
	StreamIdleTimeoutSec types.Int64  `tfsdk:"stream_idle_timeout_sec"`
	AsyncEnabled         types.Bool   `tfsdk:"async_enabled"`
	AsyncMaxAttempts     types.Int64  `tfsdk:"async_max_attempts"`
	AsyncBackoffMs       types.Int64  `tfsdk:"async_backoff_ms"`
	AsyncDLQ             types.String `tfsdk:"async_dead_letter_queue"`
	AsyncMaxJobs         types.Int64  `tfsdk:"async_max_jobs"`
	SecretEnv            types.List   `tfsdk:"secret_env"`
	SecretFiles          types.List   `tfsdk:"secret_files"`
	Traffic              types.List   `tfsdk:"traffic"`
	RevisionHistory      types.Int64  `tfsdk:"revision_history_limit"`
	Rollout              types.Object `tfsdk:"rollout"`
}

// functionStatus is what the platform reports about a function.
type functionStatus struct {
	URL                   types.String `tfsdk:"url"`
	Image                 types.String `tfsdk:"image"`
	Phase                 types.String `tfsdk:"phase"`
	LatestCreatedRevision types.String `tfsdk:"latest_created_revision"`
	LatestReadyRevision   types.String `tfsdk:"latest_ready_revision"`
}

// fields is the API request for s; unknown values (computed, not configured) are not sent,
// so the server keeps its defaults.
func (s functionSettings) fields(ctx context.Context) (api.FunctionFields, diag.Diagnostics) {
	env, diags := envVars(ctx, s.EnvVars)
	secretEnv, secretFiles, d := secretRefFields(ctx, s.SecretEnv, s.SecretFiles)
	diags.Append(d...)
	traffic, d := trafficFields(ctx, s.Traffic)
	diags.Append(d...)
	rollout, d := rolloutFields(ctx, s.Rollout)
	diags.Append(d...)
	entrypoint := setString(s.Entrypoint)
	if entrypoint == nil {
		entrypoint = new(string)
	}
	return api.FunctionFields{
		Runtime:              setString(s.Runtime),
		Entrypoint:           entrypoint,
		EnvVars:              env,
		MemoryMB:             setInt32(s.MemoryMB),
		TimeoutSec:           timeoutSeconds(s.TimeoutSec),
		MinReplicas:          setInt32(s.MinReplicas),
		MaxReplicas:          setInt32(s.MaxReplicas),
		ScaleDownPeriodSec:   setInt32(s.ScaleDownPeriodSec),
		ScalingMetric:        setString(s.ScalingMetric),
		ScalingTarget:        setInt32(s.ScalingTarget),
		StreamIdleTimeoutSec: setInt32(s.StreamIdleTimeoutSec),
		// enabled and the dead-letter queue are always sent: unset means off and the default.
		Async: &api.AsyncFields{Enabled: new(s.AsyncEnabled.ValueBool()), MaxAttempts: setInt32(s.AsyncMaxAttempts),
			BackoffMs: setInt32(s.AsyncBackoffMs), DeadLetterQueue: new(s.AsyncDLQ.ValueString()), MaxJobs: setInt32(s.AsyncMaxJobs)},
		SecretEnv:            secretEnv,
		SecretFiles:          secretFiles,
		Traffic:              traffic,
		RevisionHistoryLimit: setInt32(s.RevisionHistory),
		Rollout:              rollout,
	}, diags
}

// functionSettingsFrom maps fn's spec to attributes; prior is the state it replaces, which
// decides between null and an explicit zero.
func functionSettingsFrom(ctx context.Context, fn api.Function, prior functionSettings) (functionSettings, diag.Diagnostics) {
	env, diags := envState(ctx, fn.EnvVars, prior.EnvVars)
	secretEnv, d := secretEnvState(ctx, fn.SecretEnv, prior.SecretEnv)
	diags.Append(d...)
	secretFiles, d := secretFilesState(ctx, fn.SecretFiles, prior.SecretFiles)
	diags.Append(d...)
	traffic, d := trafficState(ctx, fn.Traffic)
	diags.Append(d...)
	rollout, d := rolloutState(ctx, fn.Rollout)
	diags.Append(d...)
	return functionSettings{
		Runtime:              types.StringValue(fn.Runtime),
		Entrypoint:           stringOrNull(fn.Entrypoint),
		EnvVars:              env,
		MemoryMB:             types.Int64Value(int64(fn.MemoryMB)),
		TimeoutSec:           timeoutState(fn.TimeoutSec, prior.TimeoutSec),
		MinReplicas:          types.Int64Value(int64(fn.MinReplicas)),
		MaxReplicas:          types.Int64Value(int64(fn.MaxReplicas)),
		ScaleDownPeriodSec:   types.Int64Value(int64(fn.ScaleDownPeriodSec)),
		ScalingMetric:        types.StringValue(fn.ScalingMetric),
		ScalingTarget:        types.Int64Value(int64(fn.ScalingTarget)),
		StreamIdleTimeoutSec: types.Int64Value(int64(fn.StreamIdleTimeoutSec)),
		AsyncEnabled:         types.BoolValue(fn.Async.Enabled),
		AsyncMaxAttempts:     types.Int64Value(int64(fn.Async.MaxAttempts)),
		AsyncBackoffMs:       types.Int64Value(int64(fn.Async.BackoffMs)),
		AsyncDLQ:             stringOrNull(fn.Async.DeadLetterQueue),
		AsyncMaxJobs:         types.Int64Value(int64(fn.Async.MaxJobs)),
		SecretEnv:            secretEnv,
		SecretFiles:          secretFiles,
		Traffic:              traffic,
		RevisionHistory:      types.Int64Value(int64(fn.RevisionHistoryLimit)),
		Rollout:              rollout,
	}, diags
}

func functionStatusFrom(fn api.Function) functionStatus {
	return functionStatus{
		URL:                   types.StringValue(fn.Status.URL),
		Image:                 types.StringValue(fn.Status.Image),
		Phase:                 types.StringValue(fn.Status.Phase),
		LatestCreatedRevision: types.StringValue(fn.Status.LatestCreatedRevision),
		LatestReadyRevision:   types.StringValue(fn.Status.LatestReadyRevision),
	}
}
