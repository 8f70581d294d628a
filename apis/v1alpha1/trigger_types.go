package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The kinds the operator knows by name (TriggerType is generated from the registry).
const (
	TriggerHTTP  TriggerType = "http"
	TriggerCron  TriggerType = "cron"
	TriggerEvent TriggerType = "event"
)

// CronSpec fires the function on exact schedule ticks.
type CronSpec struct {
	// Schedule in the five-field cron format, or a macro such as @hourly.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|\S+( +\S+){4})$`
	Schedule string `json:"schedule"`

	// Timezone is an IANA zone name such as Europe/Berlin; UTC when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9_+/-]*$`
	Timezone string `json:"timezone,omitempty"`

	// ConcurrencyPolicy decides what happens when a tick fires while the previous run is on.
	// +optional
	// +kubebuilder:default=Forbid
	// +kubebuilder:validation:Enum=Allow;Forbid;Replace
	ConcurrencyPolicy string `json:"concurrencyPolicy,omitempty"`

	// PrewarmSeconds wakes the function this long before each tick, through the
	// interceptor, and keeps it up until just after the tick, so the tick pays no cold start;
	// 0: no pre-warm.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	PrewarmSeconds int32 `json:"prewarmSeconds,omitempty"`

	// StartingDeadlineSeconds skips a tick that could not start within this many seconds.
	// +optional
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=1
	StartingDeadlineSeconds int64 `json:"startingDeadlineSeconds,omitempty"`
}

// RetryPolicy bounds redelivery of a failed invocation.
type RetryPolicy struct {
	// MaxAttempts counts the first try.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxAttempts int32 `json:"maxAttempts,omitempty"`

	// BackoffMillis is the delay before the second attempt; it doubles for each next one.
	// +optional
	// +kubebuilder:default=1000
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600000
	BackoffMillis int32 `json:"backoffMillis,omitempty"`
}

// EventSpec fires the function for each message of an AMQP queue.
type EventSpec struct {
	// Queue to consume.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	Queue string `json:"queue"`

	// BrokerSecretRef selects the amqp:// URL of the broker.
	BrokerSecretRef SecretKeyReference `json:"brokerSecretRef"`

	// QueueLength is the number of waiting messages per dispatcher job KEDA aims for.
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	QueueLength int32 `json:"queueLength,omitempty"`

	// MaxJobs caps the dispatcher jobs running at once.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxJobs int32 `json:"maxJobs,omitempty"`

	// +optional
	// +kubebuilder:default={}
	Retry RetryPolicy `json:"retry,omitempty"`

	// DeadLetterQueue receives messages that exhausted their attempts; <queue>.dlq when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=255
	DeadLetterQueue string `json:"deadLetterQueue,omitempty"`
}

// TriggerSpec binds a source of invocations to a Function in the same namespace.
// +kubebuilder:validation:XValidation:rule="self.type == 'cron' ? has(self.cron) : !has(self.cron)",message="cron (with a schedule) is required for type cron and not allowed otherwise",fieldPath=".cron"
// +kubebuilder:validation:XValidation:rule="self.type == 'event' ? has(self.event) : !has(self.event)",message="event (with a queue) is required for type event and not allowed otherwise",fieldPath=".event"
// +kubebuilder:validation:XValidation:rule="self.type == 'http' || !has(self.requireAuth) || !self.requireAuth",message="requireAuth applies to http triggers only",fieldPath=".requireAuth"
type TriggerSpec struct {
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="type is immutable; delete and re-create the trigger"
	Type TriggerType `json:"type"`

	FunctionRef LocalObjectReference `json:"functionRef"`

	// Enabled false freezes the trigger in place: scaled to zero, not firing.
	// +optional
	// +kubebuilder:default=true
	Enabled *bool `json:"enabled,omitempty"`

	// RequireAuth makes /fn/ calls through this http trigger need a valid token.
	// +optional
	RequireAuth bool `json:"requireAuth,omitempty"`

	// +optional
	Cron *CronSpec `json:"cron,omitempty"`

	// +optional
	Event *EventSpec `json:"event,omitempty"`
}

// IsEnabled reports the effective enabled flag (unset means enabled).
func (s *TriggerSpec) IsEnabled() bool { return s.Enabled == nil || *s.Enabled }

// TriggerStatus is what the operator observed.
type TriggerStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Active is true when the trigger is enabled and its function is ready.
	// +optional
	Active bool `json:"active"`

	// URL of an http trigger.
	// +optional
	URL string `json:"url,omitempty"`

	// +optional
	LastFireTime *metav1.Time `json:"lastFireTime,omitempty"`

	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Trigger fires a Function over HTTP, on a cron schedule or from an AMQP queue.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=trg,categories=sless
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Function",type=string,JSONPath=`.spec.functionRef.name`
// +kubebuilder:printcolumn:name="Enabled",type=boolean,JSONPath=`.spec.enabled`
// +kubebuilder:printcolumn:name="Active",type=boolean,JSONPath=`.status.active`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 63",message="name must be a DNS-1123 label: at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit"
type Trigger struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TriggerSpec   `json:"spec,omitempty"`
	Status TriggerStatus `json:"status,omitempty"`
}

// TriggerList is a list of Triggers.
// +kubebuilder:object:root=true
type TriggerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Trigger `json:"items"`
}
