package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// JobPhase is the lifecycle of one FunctionJob run.
// +kubebuilder:validation:Enum=Pending;Building;Running;Succeeded;Failed;Skipped
type JobPhase string

const (
	JobPending   JobPhase = "Pending"
	JobBuilding  JobPhase = "Building"
	JobRunning   JobPhase = "Running"
	JobSucceeded JobPhase = "Succeeded"
	JobFailed    JobPhase = "Failed"
	JobSkipped   JobPhase = "Skipped"
)

// FunctionJobSpec runs code once with an event: either an existing Function's code
// (functionRef) or its own (runtime + source or image, built like a Function). A
// self-contained job created before its code is uploaded waits in Pending.
// +kubebuilder:validation:XValidation:rule="has(self.functionRef) != has(self.runtime)",message="set exactly one of functionRef (run an existing function) or runtime with source or image (self-contained job)"
// +kubebuilder:validation:XValidation:rule="!has(self.functionRef) || (!has(self.source) && !has(self.image))",message="source and image belong to self-contained jobs; a job with functionRef runs that function's image"
// +kubebuilder:validation:XValidation:rule="!has(self.protocol)",message="protocol is how a function serves calls; a job serves none"
type FunctionJobSpec struct {
	// FunctionRef runs an existing Function's image with this job's event.
	// +optional
	FunctionRef *LocalObjectReference `json:"functionRef,omitempty"`

	CodeSpec `json:",inline"`

	// Event is the JSON value passed to the handler.
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	Event *apiextensionsv1.JSON `json:"event,omitempty"`

	// RunID 0 creates the job without running it; raising it runs the job again.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	RunID int64 `json:"runID"`
}

// FunctionJobStatus reports the latest run.
type FunctionJobStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// +optional
	Phase JobPhase `json:"phase,omitempty"`

	// ObservedRunID is the runID the phase and results belong to.
	// +optional
	ObservedRunID int64 `json:"observedRunID,omitempty"`

	// Image the run used (built for self-contained jobs).
	// +optional
	Image string `json:"image,omitempty"`

	// BuiltSHA256 is the source hash Image was built from (self-contained jobs).
	// +optional
	BuiltSHA256 string `json:"builtSHA256,omitempty"`

	// LastBuildSHA256 is the source hash of the most recent build attempt; a failed one is
	// not retried for the same source.
	// +optional
	LastBuildSHA256 string `json:"lastBuildSHA256,omitempty"`

	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// DurationMillis of the run itself (not the build).
	// +optional
	DurationMillis int64 `json:"durationMillis,omitempty"`

	// Result is the handler's return value as JSON text.
	// +optional
	Result string `json:"result,omitempty"`

	// Output is the tail of the run's stdout/stderr, or of the build log when the build failed.
	// +optional
	Output string `json:"output,omitempty"`

	// Error says why the run failed.
	// +optional
	Error string `json:"error,omitempty"`

	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// FunctionJob runs a function once with a given event and records the result.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fnjob,categories=sless
// +kubebuilder:printcolumn:name="Function",type=string,JSONPath=`.spec.functionRef.name`
// +kubebuilder:printcolumn:name="Run",type=integer,JSONPath=`.spec.runID`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Duration(ms)",type=integer,JSONPath=`.status.durationMillis`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 63",message="name must be a DNS-1123 label: at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit"
type FunctionJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   FunctionJobSpec   `json:"spec,omitempty"`
	Status FunctionJobStatus `json:"status,omitempty"`
}

// FunctionJobList is a list of FunctionJobs.
// +kubebuilder:object:root=true
type FunctionJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FunctionJob `json:"items"`
}
