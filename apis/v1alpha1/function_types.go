package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sless.dev/sless/rules"
)

// FunctionPhase is the coarse lifecycle state shown to users.
// +kubebuilder:validation:Enum=Pending;Building;Ready;Failed
type FunctionPhase string

const (
	FunctionPending  FunctionPhase = rules.PhasePending
	FunctionBuilding FunctionPhase = rules.PhaseBuilding
	FunctionReady    FunctionPhase = rules.PhaseReady
	FunctionFailed   FunctionPhase = rules.PhaseFailed
)

// ScalingMetric selects what the HTTP add-on scales on.
// +kubebuilder:validation:Enum=concurrency;requestRate
type ScalingMetric string

const (
	ScaleOnConcurrency ScalingMetric = "concurrency"
	ScaleOnRequestRate ScalingMetric = "requestRate"
)

// ScaleSpec bounds the number of instances. minReplicas 0 scales to zero when idle;
// minReplicas >= 1 keeps the function always on.
// +kubebuilder:validation:XValidation:rule="!has(self.maxReplicas) || !has(self.minReplicas) || self.maxReplicas >= self.minReplicas",message="maxReplicas must be greater than or equal to minReplicas",fieldPath=".maxReplicas"
type ScaleSpec struct {
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	MinReplicas int32 `json:"minReplicas,omitempty"`

	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxReplicas int32 `json:"maxReplicas,omitempty"`

	// ScaleDownPeriodSeconds is how long a function stays up after its last request.
	// +optional
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	ScaleDownPeriodSeconds int32 `json:"scaleDownPeriodSeconds,omitempty"`

	// Metric is concurrency (in-flight requests per instance) or requestRate (requests per
	// second per instance).
	// +optional
	// +kubebuilder:default=concurrency
	Metric ScalingMetric `json:"metric,omitempty"`

	// Target is the per-instance value of Metric above which another instance starts.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	Target int32 `json:"target,omitempty"`
}

// FunctionSpec is what a user declares: code, how to run it and how to scale it.
type FunctionSpec struct {
	CodeSpec `json:",inline"`

	// +optional
	// +kubebuilder:default={}
	Scale ScaleSpec `json:"scale,omitempty"`

	// StreamIdleTimeoutSeconds ends a streamed response (SSE, chunked) that sends nothing for
	// this long, or a WebSocket with no byte either way; the gateway ends it cleanly (a final
	// comment, a close frame). The timeout bounds a stream's whole length.
	// +optional
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	StreamIdleTimeoutSeconds int32 `json:"streamIdleTimeoutSeconds,omitempty"`

	// Async lets callers invoke the function asynchronously (Prefer: respond-async): the
	// gateway queues each call on RabbitMQ and a dispatcher the operator runs through KEDA
	// replays it, with retries, then the dead-letter queue.
	// +optional
	// +kubebuilder:default={}
	Async AsyncSpec `json:"async,omitempty"`

	// Traffic splits the function's calls between its revisions; empty sends all of them
	// to the newest ready revision (rules.DefaultTraffic).
	// +optional
	// +kubebuilder:validation:MaxItems=10
	Traffic []TrafficTarget `json:"traffic,omitempty"`

	// RevisionHistoryLimit is how many revisions without traffic or a tag are kept; older
	// ones are deleted with their objects.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	RevisionHistoryLimit int32 `json:"revisionHistoryLimit,omitempty"`

	// Rollout, when set, moves latest's share to a new ready revision in steps gated by its
	// own error rate in the invocation history.
	// +optional
	Rollout *RolloutSpec `json:"rollout,omitempty"`
}

// TrafficTarget is one entry of a function's traffic (rules.TrafficTarget).
// +kubebuilder:validation:XValidation:rule="has(self.revision) != (has(self.latest) && self.latest)",message="set either revision or latest: true"
type TrafficTarget struct {
	// Revision names one of the function's revisions, <function>-<n>.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Revision string `json:"revision,omitempty"`
	// Latest follows the newest ready revision.
	// +optional
	Latest bool `json:"latest,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Percent int32 `json:"percent"`
	// Tag gives the revision a route of its own (X-Sless-Tag, <tag>-<function>.<ns>.<domain>).
	// +optional
	// +kubebuilder:validation:MaxLength=20
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9]*$`
	Tag string `json:"tag,omitempty"`
}

// RolloutSpec is a health-gated rollout policy (rules.Rollout).
type RolloutSpec struct {
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=10
	Steps []int32 `json:"steps"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	IntervalSeconds int32 `json:"intervalSeconds"`
	// MaxErrorRate is a decimal from 0 to 1, e.g. "0.05".
	// +kubebuilder:validation:Pattern=`^(0(\.[0-9]+)?|1(\.0+)?)$`
	MaxErrorRate string `json:"maxErrorRate"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	MinRequests int32 `json:"minRequests,omitempty"`
}

// AsyncSpec governs a function's asynchronous invocations.
type AsyncSpec struct {
	// Enabled turns asynchronous invocations on.
	// +optional
	Enabled bool `json:"enabled,omitempty"`

	// +optional
	// +kubebuilder:default={}
	Retry RetryPolicy `json:"retry,omitempty"`

	// DeadLetterQueue receives invocations that exhausted their attempts;
	// <namespace>.async.<name>.dlq when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=255
	DeadLetterQueue string `json:"deadLetterQueue,omitempty"`

	// MaxJobs caps the dispatcher Jobs draining the queue at once.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxJobs int32 `json:"maxJobs,omitempty"`
}

// FunctionStatus is what the operator observed.
type FunctionStatus struct {
	// ObservedGeneration is the generation the status describes; Ready means nothing unless it
	// equals metadata.generation.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// +optional
	Phase FunctionPhase `json:"phase,omitempty"`

	// Image is the image the Deployment runs, by digest (<repository>@sha256:…): the one the
	// build pushed, or spec.image's tag resolved.
	// +optional
	Image string `json:"image,omitempty"`

	// BuiltSHA256 is the source hash Image was built from.
	// +optional
	BuiltSHA256 string `json:"builtSHA256,omitempty"`

	// URL is where callers invoke the function (gateway /fn/<namespace>/<name>).
	// +optional
	URL string `json:"url,omitempty"`

	// RoutingHost is the host the KEDA HTTP interceptor routes on for this function.
	// +optional
	RoutingHost string `json:"routingHost,omitempty"`

	// LastBuildSHA256 is the source hash of the most recent build attempt; with
	// LastBuildError set it failed, and the same source is not built again.
	// +optional
	LastBuildSHA256 string `json:"lastBuildSHA256,omitempty"`

	// +optional
	LastBuildTime *metav1.Time `json:"lastBuildTime,omitempty"`

	// LastBuildError is the reason and log tail of the last failed build.
	// +optional
	LastBuildError string `json:"lastBuildError,omitempty"`

	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// LastRevisionNumber is the number of the newest revision ever created; numbers are
	// never reused.
	// +optional
	LastRevisionNumber int64 `json:"lastRevisionNumber,omitempty"`

	// +optional
	LatestCreatedRevision string `json:"latestCreatedRevision,omitempty"`

	// +optional
	LatestReadyRevision string `json:"latestReadyRevision,omitempty"`

	// Traffic is spec.traffic with latest resolved (and a rollout applied): what the gateway
	// routes by.
	// +optional
	Traffic []ResolvedTrafficTarget `json:"traffic,omitempty"`

	// Rollout is where the health-gated rollout stands.
	// +optional
	Rollout *RolloutStatus `json:"rollout,omitempty"`
}

// ResolvedTrafficTarget is a traffic entry with latest resolved (rules.ResolvedTarget).
type ResolvedTrafficTarget struct {
	// +optional
	Revision string `json:"revision,omitempty"`
	// +optional
	Latest  bool  `json:"latest,omitempty"`
	Percent int32 `json:"percent"`
	// +optional
	Tag string `json:"tag,omitempty"`
}

// RolloutStatus is where a rollout stands (rules.RolloutState).
type RolloutStatus struct {
	Revision    string      `json:"revision"`
	Previous    string      `json:"previous"`
	Phase       string      `json:"phase"`
	Step        int32       `json:"step"`
	Percent     int32       `json:"percent"`
	StepStarted metav1.Time `json:"stepStarted"`
	// +optional
	Requests int64 `json:"requests,omitempty"`
	// +optional
	Errors int64 `json:"errors,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// Function is a unit of user code run on demand and scaled to zero when idle.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fn;fns,categories=sless
// +kubebuilder:printcolumn:name="Runtime",type=string,JSONPath=`.spec.runtime`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.status.url`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 63",message="name must be a DNS-1123 label: at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit"
// +kubebuilder:validation:XValidation:rule="has(self.spec.runtime)",message="spec.runtime is required",fieldPath=".spec.runtime",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="!has(self.spec.protocol) || self.spec.protocol != 'h2c' || has(self.spec.image)",message="protocol h2c needs a prebuilt image (image): the runtimes' wrappers speak HTTP/1.1",fieldPath=".spec.protocol"
type Function struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   FunctionSpec   `json:"spec,omitempty"`
	Status FunctionStatus `json:"status,omitempty"`
}

// FunctionList is a list of Functions.
// +kubebuilder:object:root=true
type FunctionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Function `json:"items"`
}
