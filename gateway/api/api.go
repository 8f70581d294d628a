// Package api is the wire model of the sless REST API (/v1): plain JSON structs shared by the
// gateway, its Go client, the CLI and the Terraform provider. It depends on the standard library
// only, so every consumer can import it without pulling in Kubernetes or the server.
//
// Field names are snake_case to match the Terraform attributes. In request bodies a field that
// is absent (a nil pointer) is left unchanged by an update; only sent fields are applied.
package api

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"time"

	"sless.dev/sless/rules"
)

// TenantNamespace is the namespace of the tenant whose token has subject sub:
// "sless-" + hex(sha256(sub)[:8]).
func TenantNamespace(sub string) string {
	sum := sha256.Sum256([]byte(sub))
	return "sless-" + hex.EncodeToString(sum[:8])
}

// Error is the body of every non-2xx answer. Field names the request field at fault (JSON
// name, dotted for nested fields) when one is.
type Error struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

// Namespace answers POST /v1/namespaces/{ns}/ensure.
type Namespace struct {
	Name string `json:"name"`
}

// Identity answers GET /v1/whoami: who the token belongs to and the namespace it may use.
type Identity struct {
	Subject   string `json:"subject"`
	Namespace string `json:"namespace"`
}

// Runtimes accepted by the API.
var Runtimes = []string{"go1.23", "go1.25", "python3.11", "python3.12", "nodejs20", "nodejs22"}

// Function phases, as rules derives them.
const (
	PhasePending  = rules.PhasePending
	PhaseBuilding = rules.PhaseBuilding
	PhaseReady    = rules.PhaseReady
	PhaseFailed   = rules.PhaseFailed
)

// Function is a function as the API returns it.
type Function struct {
	Name      string    `json:"name"`
	Namespace string    `json:"namespace"`
	CreatedAt time.Time `json:"created_at"`
	FunctionSpec
	Status FunctionStatus `json:"status"`
}

// FunctionSpec is a function's declared configuration.
type FunctionSpec struct {
	Runtime    string            `json:"runtime"`
	Entrypoint string            `json:"entrypoint,omitempty"`
	EnvVars    map[string]string `json:"env_vars,omitempty"`
	MemoryMB   int32             `json:"memory_mb,omitempty"`
	// TimeoutSec bounds one invocation in seconds; 0 means no limit.
	TimeoutSec         int32  `json:"timeout_sec"`
	MinReplicas        int32  `json:"min_replicas"`
	MaxReplicas        int32  `json:"max_replicas,omitempty"`
	ScaleDownPeriodSec int32  `json:"scale_down_period_sec,omitempty"`
	ScalingMetric      string `json:"scaling_metric,omitempty"`
	ScalingTarget      int32  `json:"scaling_target,omitempty"`
	// StreamIdleTimeoutSec ends a streamed response that sends nothing for this long, or a
	// WebSocket with no byte either way.
	StreamIdleTimeoutSec int32 `json:"stream_idle_timeout_sec,omitempty"`
	// Image is a prebuilt image; when set no build runs.
	Image string `json:"image,omitempty"`
	// Protocol is what the function's server speaks: http1, or h2c for an image serving
	// HTTP/2 without TLS (gRPC).
	Protocol string `json:"protocol,omitempty"`
	// Source is the uploaded code; set by POST .../upload, never by create or update.
	Source *Source `json:"source,omitempty"`
	// Async lets callers invoke the function asynchronously (Prefer: respond-async).
	Async AsyncPolicy `json:"async"`
	// SecretEnv and SecretFiles hand the function values of the namespace's secrets, by
	// reference: the function object holds names, never values.
	SecretEnv   []SecretEnv  `json:"secret_env,omitempty"`
	SecretFiles []SecretFile `json:"secret_files,omitempty"`
	// Traffic splits the function's calls between its revisions (default: all to the
	// newest ready one).
	Traffic []TrafficTarget `json:"traffic"`
	// RevisionHistoryLimit is how many revisions without traffic or a tag are kept; older
	// ones are deleted.
	RevisionHistoryLimit int32 `json:"revision_history_limit"`
	// Rollout, when set, moves latest's share to a new ready revision in health-gated steps.
	Rollout *Rollout `json:"rollout,omitempty"`
}

// Rollout is a function's health-gated rollout policy (rules.Rollout).
type Rollout = rules.Rollout

// RolloutState is where a function's rollout stands (rules.RolloutState).
type RolloutState = rules.RolloutState

// Rollout phases.
const (
	RolloutProgressing = rules.RolloutProgressing
	RolloutComplete    = rules.RolloutComplete
	RolloutRolledBack  = rules.RolloutRolledBack
)

// TrafficTarget is one entry of a function's traffic (rules.TrafficTarget).
type TrafficTarget = rules.TrafficTarget

// ResolvedTarget is a traffic entry with latest resolved to a revision name.
type ResolvedTarget = rules.ResolvedTarget

// Revision phases.
const (
	RevisionBuilding = rules.RevisionBuilding
	RevisionReady    = rules.RevisionReady
	RevisionFailed   = rules.RevisionFailed
)

// Revision is an immutable snapshot of what a function runs, named <function>-<n>. Every
// change to what runs (source or image, runtime, entrypoint, env, secret references,
// memory, timeout) makes a new one; scaling settings apply to all of them.
type Revision struct {
	Name      string         `json:"name"`
	Namespace string         `json:"namespace"`
	Function  string         `json:"function"`
	Number    int64          `json:"number"`
	CreatedAt time.Time      `json:"created_at"`
	Config    RevisionConfig `json:"config"`
	Status    RevisionStatus `json:"status"`
	// Percent is the share of the function's calls it gets now; Tags the routes of its own.
	Percent int32    `json:"percent"`
	Tags    []string `json:"tags"`
}

// RevisionConfig is what a revision runs.
type RevisionConfig struct {
	Runtime    string            `json:"runtime"`
	Entrypoint string            `json:"entrypoint,omitempty"`
	EnvVars    map[string]string `json:"env_vars,omitempty"`
	MemoryMB   int32             `json:"memory_mb,omitempty"`
	TimeoutSec int32             `json:"timeout_sec"`
	Image      string            `json:"image,omitempty"`
	// Protocol is set when the revision's server speaks h2c (absent: http1).
	Protocol    string       `json:"protocol,omitempty"`
	Source      *Source      `json:"source,omitempty"`
	SecretEnv   []SecretEnv  `json:"secret_env,omitempty"`
	SecretFiles []SecretFile `json:"secret_files,omitempty"`
}

// SameRevisionConfig reports whether two configurations run the same: the same source by
// content hash (a new upload of the same code is not a change), the rest equal.
func SameRevisionConfig(a, b RevisionConfig) bool {
	if (a.Source == nil) != (b.Source == nil) || a.Source != nil && a.Source.SHA256 != b.Source.SHA256 {
		return false
	}
	a.Source, b.Source = nil, nil
	x, errA := json.Marshal(a)
	y, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(x) == string(y)
}

// RevisionConfigOf is the part of a function's spec a revision snapshots.
func RevisionConfigOf(s FunctionSpec) RevisionConfig {
	c := RevisionConfig{Runtime: s.Runtime, Entrypoint: s.Entrypoint, EnvVars: maps.Clone(s.EnvVars), MemoryMB: s.MemoryMB,
		TimeoutSec: s.TimeoutSec, Image: s.Image, Protocol: rules.StoredProtocol(s.Protocol), SecretEnv: slices.Clone(s.SecretEnv), SecretFiles: slices.Clone(s.SecretFiles)}
	if s.Source != nil {
		src := *s.Source
		c.Source = &src
	}
	return c
}

// RevisionStatus is where a revision's build and start stand (rules.RevisionStatus).
type RevisionStatus = rules.RevisionStatus

// RevisionState is what the traffic rules read of the revision.
func (r Revision) RevisionState() rules.RevisionState {
	return rules.RevisionState{Name: r.Name, Number: r.Number, Phase: r.Status.Phase}
}

// RevisionList answers GET .../functions/{name}/revisions, oldest first.
type RevisionList struct {
	Revisions []Revision `json:"revisions"`
}

// Rollback is the body of POST .../functions/{name}/rollback: To is the revision that gets
// all traffic; empty, the newest ready revision older than the newest one with traffic now.
type Rollback struct {
	To string `json:"to,omitempty"`
}

// SecretEnv sets the variable Name to the value of Key in the secret Secret.
type SecretEnv struct {
	Name   string `json:"name"`
	Secret string `json:"secret"`
	Key    string `json:"key"`
}

// SecretFile mounts every key of the secret Secret as a file (named as the key, mode 0400)
// in the directory Path, /var/sless/secrets/<secret> when empty.
type SecretFile struct {
	Secret string `json:"secret"`
	Path   string `json:"path,omitempty"`
}

// AsyncPolicy governs a function's asynchronous invocations: off unless Enabled; each gets
// MaxAttempts attempts BackoffMs apart (doubling), then goes to DeadLetterQueue
// (<namespace>.async.<function>.dlq when empty) with its last error. MaxJobs caps the
// dispatcher Jobs draining the queue at once in a cluster (sless dev keeps it and runs one
// runner per function whatever it says).
type AsyncPolicy struct {
	Enabled         bool   `json:"enabled"`
	MaxAttempts     int32  `json:"max_attempts"`
	BackoffMs       int32  `json:"backoff_ms"`
	DeadLetterQueue string `json:"dead_letter_queue,omitempty"`
	MaxJobs         int32  `json:"max_jobs"`
}

// AsyncFields are the settable fields of AsyncPolicy; nil fields are not sent.
type AsyncFields struct {
	Enabled         *bool   `json:"enabled,omitempty"`
	MaxAttempts     *int32  `json:"max_attempts,omitempty"`
	BackoffMs       *int32  `json:"backoff_ms,omitempty"`
	DeadLetterQueue *string `json:"dead_letter_queue,omitempty"`
	MaxJobs         *int32  `json:"max_jobs,omitempty"`
}

// Source locates a function's uploaded code.
type Source struct {
	ContextKey string `json:"context_key"`
	ArchiveKey string `json:"archive_key,omitempty"`
	SHA256     string `json:"sha256"`
}

// FunctionStatus is what the platform observed. Ready is true only when the phase is Ready
// for the latest configuration (so a client that just uploaded code does not see the old
// build's Ready).
type FunctionStatus struct {
	Phase          string     `json:"phase,omitempty"`
	Ready          bool       `json:"ready"`
	Message        string     `json:"message,omitempty"`
	URL            string     `json:"url,omitempty"`
	Image          string     `json:"image,omitempty"`
	LastBuildTime  *time.Time `json:"last_build_time,omitempty"`
	LastBuildError string     `json:"last_build_error,omitempty"`
	// LatestCreatedRevision is the newest revision, LatestReadyRevision the newest that can
	// serve ("latest" in traffic); Traffic is the function's traffic with latest resolved.
	LatestCreatedRevision string           `json:"latest_created_revision,omitempty"`
	LatestReadyRevision   string           `json:"latest_ready_revision,omitempty"`
	Traffic               []ResolvedTarget `json:"traffic,omitempty"`
	// Rollout is the last rollout of a new revision, while its policy is set.
	Rollout *RolloutState `json:"rollout,omitempty"`
}

// FunctionFields are the settable fields of a function; nil fields are not sent. EnvVars
// replaces the whole map when sent ({} clears it).
type FunctionFields struct {
	Runtime              *string            `json:"runtime,omitempty"`
	Entrypoint           *string            `json:"entrypoint,omitempty"`
	EnvVars              *map[string]string `json:"env_vars,omitempty"`
	MemoryMB             *int32             `json:"memory_mb,omitempty"`
	TimeoutSec           *int32             `json:"timeout_sec,omitempty"`
	MinReplicas          *int32             `json:"min_replicas,omitempty"`
	MaxReplicas          *int32             `json:"max_replicas,omitempty"`
	ScaleDownPeriodSec   *int32             `json:"scale_down_period_sec,omitempty"`
	ScalingMetric        *string            `json:"scaling_metric,omitempty"`
	ScalingTarget        *int32             `json:"scaling_target,omitempty"`
	StreamIdleTimeoutSec *int32             `json:"stream_idle_timeout_sec,omitempty"`
	Image                *string            `json:"image,omitempty"`
	Protocol             *string            `json:"protocol,omitempty"`
	Async                *AsyncFields       `json:"async,omitempty"`
	// SecretEnv and SecretFiles replace the whole list when sent ([] clears it).
	SecretEnv   *[]SecretEnv  `json:"secret_env,omitempty"`
	SecretFiles *[]SecretFile `json:"secret_files,omitempty"`
	// Traffic replaces the whole list when sent.
	Traffic              *[]TrafficTarget `json:"traffic,omitempty"`
	RevisionHistoryLimit *int32           `json:"revision_history_limit,omitempty"`
	// Rollout replaces the policy when sent; one without steps ({}) removes it.
	Rollout *Rollout `json:"rollout,omitempty"`
}

// CreateFunction is the body of POST /v1/namespaces/{ns}/functions.
type CreateFunction struct {
	Name string `json:"name"`
	FunctionFields
}

// Secret is a secret as the API returns it: its keys and version, never a value.
type Secret struct {
	Name      string    `json:"name"`
	Namespace string    `json:"namespace"`
	CreatedAt time.Time `json:"created_at"`
	// UpdatedAt is when the data was last replaced; Version counts replacements (1 at
	// creation).
	UpdatedAt time.Time `json:"updated_at"`
	Version   int64     `json:"version"`
	Keys      []string  `json:"keys"`
}

// SecretSpec is a secret's data: what the gateway hands a control plane to store, never
// what it answers.
type SecretSpec struct {
	Data map[string][]byte `json:"-"`
}

// SecretFields is the body of PUT .../secrets/{name}: the secret's whole new data. Data holds
// text values, DataBase64 binary ones (standard base64); a key may be in one of them only.
type SecretFields struct {
	Data       map[string]string `json:"data,omitempty"`
	DataBase64 map[string]string `json:"data_base64,omitempty"`
}

// CreateSecret is the body of POST /v1/namespaces/{ns}/secrets.
type CreateSecret struct {
	Name string `json:"name"`
	SecretFields
}

// Trigger types.
const (
	TriggerHTTP  = "http"
	TriggerCron  = "cron"
	TriggerEvent = "event"
)

// TriggerKind describes a trigger kind for clients (the CLI, the Terraform provider): its
// type and the fields only it takes. TriggerKinds, generated from the kinds' own packages
// (sless.dev/sless/triggers) by `make generate`, lists them without importing those.
type TriggerKind struct {
	Name   string
	Fields []TriggerField
}

// TriggerField is one field of a trigger kind; Required: a trigger of the kind must set it.
type TriggerField struct {
	Name     string
	Required bool
}

// Trigger is a trigger as the API returns it.
type Trigger struct {
	Name      string    `json:"name"`
	Namespace string    `json:"namespace"`
	CreatedAt time.Time `json:"created_at"`
	TriggerSpec
	Status TriggerStatus `json:"status"`
}

// TriggerSpec is a trigger's declared configuration. Schedule, Timezone and PrewarmSeconds
// apply to cron triggers; Queue, the broker secret, retries and DeadLetterQueue to event triggers;
// RequireAuth to http triggers.
type TriggerSpec struct {
	Type        string `json:"type"`
	Function    string `json:"function"`
	Enabled     bool   `json:"enabled"`
	RequireAuth bool   `json:"require_auth,omitempty"`
	Schedule    string `json:"schedule,omitempty"`
	Timezone    string `json:"timezone,omitempty"`
	// PrewarmSeconds wakes the function this long before each tick of a cron trigger, so
	// the tick finds it warm; 0: no pre-warm.
	PrewarmSeconds  int32  `json:"prewarm_seconds,omitempty"`
	Queue           string `json:"queue,omitempty"`
	BrokerSecret    string `json:"broker_secret,omitempty"`
	BrokerSecretKey string `json:"broker_secret_key,omitempty"`
	MaxAttempts     int32  `json:"max_attempts,omitempty"`
	BackoffMs       int32  `json:"backoff_ms,omitempty"`
	DeadLetterQueue string `json:"dead_letter_queue,omitempty"`
}

// TriggerStatus is what the platform observed.
type TriggerStatus struct {
	Active       bool       `json:"active"`
	URL          string     `json:"url,omitempty"`
	LastFireTime *time.Time `json:"last_fire_time,omitempty"`
	Message      string     `json:"message,omitempty"`
	// Source is where the trigger's calls come from, for people: its URL, schedule or queue,
	// as its kind describes it. Read-only: the API fills it in every answer.
	Source string `json:"source,omitempty"`
}

// TriggerFields are the settable fields of a trigger; nil fields are not sent. Type is
// accepted on create only (it is immutable).
type TriggerFields struct {
	Type            *string `json:"type,omitempty"`
	Function        *string `json:"function,omitempty"`
	Enabled         *bool   `json:"enabled,omitempty"`
	RequireAuth     *bool   `json:"require_auth,omitempty"`
	Schedule        *string `json:"schedule,omitempty"`
	Timezone        *string `json:"timezone,omitempty"`
	PrewarmSeconds  *int32  `json:"prewarm_seconds,omitempty"`
	Queue           *string `json:"queue,omitempty"`
	BrokerSecret    *string `json:"broker_secret,omitempty"`
	BrokerSecretKey *string `json:"broker_secret_key,omitempty"`
	MaxAttempts     *int32  `json:"max_attempts,omitempty"`
	BackoffMs       *int32  `json:"backoff_ms,omitempty"`
	DeadLetterQueue *string `json:"dead_letter_queue,omitempty"`
}

// CreateTrigger is the body of POST /v1/namespaces/{ns}/triggers.
type CreateTrigger struct {
	Name string `json:"name"`
	TriggerFields
}

// Job phases.
const (
	JobPending   = "Pending"
	JobBuilding  = "Building"
	JobRunning   = "Running"
	JobSucceeded = "Succeeded"
	JobFailed    = "Failed"
	JobSkipped   = "Skipped"
)

// Job is a one-off run of a function with an event.
type Job struct {
	Name      string    `json:"name"`
	Namespace string    `json:"namespace"`
	CreatedAt time.Time `json:"created_at"`
	JobSpec
	Status JobStatus `json:"status"`
}

// JobSpec runs either an existing function (Function) or its own code (Runtime with Image or
// an uploaded Source). RunID 0 creates the job without running it; raising it runs it again.
type JobSpec struct {
	Function   string            `json:"function,omitempty"`
	Runtime    string            `json:"runtime,omitempty"`
	Entrypoint string            `json:"entrypoint,omitempty"`
	EnvVars    map[string]string `json:"env_vars,omitempty"`
	MemoryMB   int32             `json:"memory_mb,omitempty"`
	TimeoutSec int32             `json:"timeout_sec"`
	Image      string            `json:"image,omitempty"`
	Source     *Source           `json:"source,omitempty"`
	Event      json.RawMessage   `json:"event,omitempty"`
	RunID      int64             `json:"run_id"`
}

// JobStatus reports the latest run.
type JobStatus struct {
	Phase          string     `json:"phase,omitempty"`
	ObservedRunID  int64      `json:"observed_run_id"`
	StartTime      *time.Time `json:"start_time,omitempty"`
	CompletionTime *time.Time `json:"completion_time,omitempty"`
	DurationMs     int64      `json:"duration_ms,omitempty"`
	Result         string     `json:"result,omitempty"`
	Output         string     `json:"output,omitempty"` // tail of what the run printed (stdout and stderr)
	Error          string     `json:"error,omitempty"`
}

// JobFields are the settable fields of a job; nil fields are not sent.
type JobFields struct {
	Function   *string            `json:"function,omitempty"`
	Runtime    *string            `json:"runtime,omitempty"`
	Entrypoint *string            `json:"entrypoint,omitempty"`
	EnvVars    *map[string]string `json:"env_vars,omitempty"`
	MemoryMB   *int32             `json:"memory_mb,omitempty"`
	TimeoutSec *int32             `json:"timeout_sec,omitempty"`
	Image      *string            `json:"image,omitempty"`
	Event      *json.RawMessage   `json:"event,omitempty"`
	RunID      *int64             `json:"run_id,omitempty"`
}

// CreateJob is the body of POST /v1/namespaces/{ns}/jobs.
type CreateJob struct {
	Name string `json:"name"`
	JobFields
}

// SourceFiles answers GET .../functions/{name}/source: the files exactly as uploaded.
type SourceFiles struct {
	Function string       `json:"function"`
	Key      string       `json:"key"`
	Files    []SourceFile `json:"files"`
}

// SourceFile is one uploaded file. Content holds UTF-8 text; binary or oversized files have
// Omitted set and no content.
type SourceFile struct {
	Name    string `json:"name"`
	Size    int64  `json:"size"`
	Content string `json:"content,omitempty"`
	Omitted string `json:"omitted,omitempty"`
}

// Invocation kinds.
const (
	KindHTTP  = "http"
	KindEvent = "event"
	KindCron  = "cron"
	KindJob   = "job"
	KindAsync = "async" // an asynchronous invocation's attempt
)

// Invocation is one recorded call of a function.
type Invocation struct {
	ID         int64     `json:"id"`
	Function   string    `json:"function"`
	Trigger    string    `json:"trigger,omitempty"`
	Kind       string    `json:"kind"`
	Start      time.Time `json:"start"`
	DurationMs float64   `json:"duration_ms"`
	Status     string    `json:"status"`
	HTTPStatus int       `json:"http_status,omitempty"`
	Error      string    `json:"error,omitempty"`
	TraceID    string    `json:"trace_id,omitempty"`
	// ColdStart: the invocation waited for an instance to start.
	ColdStart bool `json:"cold_start"`
	// Revision is the function's revision that served it, where known.
	Revision string `json:"revision,omitempty"`
	// TTFBMs is how long an HTTP call waited for the function's answer to begin, BytesSent
	// the bytes of the answer's body sent to the caller, Streamed whether the answer had no
	// length (chunked, SSE) or was an upgrade (WebSocket).
	TTFBMs    float64 `json:"ttfb_ms,omitempty"`
	BytesSent int64   `json:"bytes_sent,omitempty"`
	Streamed  bool    `json:"streamed,omitempty"`
}

// Invocations is one page of invocations, newest first; pass Next as ?before= for the next
// page ("" on the last page).
type Invocations struct {
	Invocations []Invocation `json:"invocations"`
	Next        string       `json:"next,omitempty"`
}

// InvocationSummary counts invocations and their duration percentiles. Errors are the ones
// that did not succeed (failed or timed out); P50Ms and P95Ms are absent when Count is 0.
type InvocationSummary struct {
	Count  int64    `json:"count"`
	Errors int64    `json:"errors"`
	P50Ms  *float64 `json:"p50_ms,omitempty"`
	P95Ms  *float64 `json:"p95_ms,omitempty"`
}

// StatsBucket summarizes the invocations started in [Start, Start+bucket_sec).
type StatsBucket struct {
	Start time.Time `json:"start"`
	InvocationSummary
}

// InvocationStats answers GET .../functions/{name}/stats?window=: the window's total and
// every bucket of it, oldest first (empty ones included); the last bucket is the current
// one, still filling.
type InvocationStats struct {
	Window    string            `json:"window"`
	BucketSec int               `json:"bucket_sec"`
	Start     time.Time         `json:"start"`
	End       time.Time         `json:"end"`
	Total     InvocationSummary `json:"total"`
	Buckets   []StatsBucket     `json:"buckets"`
}

// UsageFigures are what a group of invocations used: errors are the ones that failed or
// timed out; duration_ms the sum of their durations; gb_seconds the sum of memory_mb / 1024
// × each one's duration rounded up to the millisecond, in seconds; bytes_out the bytes of
// the answers sent on.
type UsageFigures struct {
	Invocations int64   `json:"invocations"`
	Errors      int64   `json:"errors"`
	ColdStarts  int64   `json:"cold_starts"`
	DurationMs  float64 `json:"duration_ms"`
	GBSeconds   float64 `json:"gb_seconds"`
	BytesOut    int64   `json:"bytes_out"`
}

// UsageRow is one group of a usage read: the hour's start (by hour), the UTC day as
// YYYY-MM-DD (by day) or the function (by function).
type UsageRow struct {
	Hour     *time.Time `json:"hour,omitempty"`
	Day      string     `json:"day,omitempty"`
	Function string     `json:"function,omitempty"`
	UsageFigures
}

// Usage answers GET /v1/namespaces/{ns}/usage: the window in whole UTC hours, the groups
// that used anything (oldest first, or by function name) and their total.
type Usage struct {
	From  time.Time    `json:"from"`
	To    time.Time    `json:"to"`
	By    string       `json:"by"`
	Rows  []UsageRow   `json:"rows"`
	Total UsageFigures `json:"total"`
}

// List bodies.
type (
	FunctionList struct {
		Functions []Function `json:"functions"`
	}
	TriggerList struct {
		Triggers []Trigger `json:"triggers"`
	}
	JobList struct {
		Jobs []Job `json:"jobs"`
	}
	SecretList struct {
		Secrets []Secret `json:"secrets"`
	}
)

// LogLine is one line of GET .../logs (application/x-ndjson, one object a line): what a
// function's instance, a build or a job run printed.
type LogLine struct {
	Time time.Time `json:"time"`
	// Instance is the process or pod that printed it; Revision the function's revision it
	// runs, where known.
	Instance string `json:"instance,omitempty"`
	Revision string `json:"revision,omitempty"`
	// Stream is "stdout" or "stderr"; "" where the platform cannot tell them apart.
	Stream string `json:"stream,omitempty"`
	Line   string `json:"line"`
}

// AsyncInvocation answers POST /fn/... with Prefer: respond-async (202, with Location its
// URL) and GET /v1/namespaces/{ns}/invocations/{id}.
type AsyncInvocation struct {
	ID       string `json:"id"`
	Function string `json:"function"`
	// Status is queued, running, succeeded or failed (every attempt failed: dead-lettered).
	Status      string    `json:"status"`
	Attempts    int       `json:"attempts"`
	MaxAttempts int       `json:"max_attempts"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	HTTPStatus  int       `json:"http_status,omitempty"`
	// Result is the function's answer: text as is, anything else base64 (result_base64);
	// at most 256 KiB (result_truncated says there was more).
	Result          string `json:"result,omitempty"`
	ResultBase64    bool   `json:"result_base64,omitempty"`
	ResultTruncated bool   `json:"result_truncated,omitempty"`
	ContentType     string `json:"content_type,omitempty"`
	Error           string `json:"error,omitempty"`
	IdempotencyKey  string `json:"idempotency_key,omitempty"`
	ColdStart       bool   `json:"cold_start"`
}

// AsyncInvocations answers GET /v1/namespaces/{ns}/invocations (newest first).
type AsyncInvocations struct {
	Invocations []AsyncInvocation `json:"invocations"`
}

// SecretNames lists the secrets the function references, sorted, each once.
func (s FunctionSpec) SecretNames() []string {
	var names []string
	for _, e := range s.SecretEnv {
		names = append(names, e.Secret)
	}
	for _, f := range s.SecretFiles {
		names = append(names, f.Secret)
	}
	slices.Sort(names)
	return slices.Compact(names)
}
