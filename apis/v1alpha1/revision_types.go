package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sless.dev/sless/rules"
)

// RevisionPhase is where a revision's build stands.
// +kubebuilder:validation:Enum=building;ready;failed
type RevisionPhase string

// RevisionSpec is what a revision runs: a snapshot of its function's code, runtime and
// run settings when it was made. Scaling is the function's and applies to every revision.
type RevisionSpec struct {
	// Function names the function the revision belongs to.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Function string `json:"function"`

	// Number is n of the revision's name, <function>-<n>.
	// +kubebuilder:validation:Minimum=1
	Number int64 `json:"number"`

	CodeSpec `json:",inline"`
}

// RevisionStatus is what the operator observed of a revision.
type RevisionStatus struct {
	// +optional
	Phase RevisionPhase `json:"phase,omitempty"`

	// Message says why a revision failed, or what it waits for.
	// +optional
	Message string `json:"message,omitempty"`

	// Image is the image (by digest) the revision runs once built.
	// +optional
	Image string `json:"image,omitempty"`

	// Serving says whether the revision has traffic or a tag, and so its own Deployment,
	// Service and HTTPScaledObject; ServingChanged when that last flipped: the objects of
	// a revision that stopped serving go once callers routed by an older view are done.
	// +optional
	Serving bool `json:"serving,omitempty"`
	// +optional
	ServingChanged *metav1.Time `json:"servingChanged,omitempty"`
}

// Revision is an immutable snapshot of what a function runs, named <function>-<n>. The
// function's reconciler makes one for every change to what runs and deletes old ones
// (revisionHistoryLimit); each revision with traffic owns the objects that run it.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rev;revs,categories=sless
// +kubebuilder:printcolumn:name="Function",type=string,JSONPath=`.spec.function`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Serving",type=boolean,JSONPath=`.status.serving`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.spec == oldSelf.spec",message="a revision is never edited: change its function, which makes a new revision"
type Revision struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RevisionSpec   `json:"spec,omitempty"`
	Status RevisionStatus `json:"status,omitempty"`
}

// RevisionState is what the traffic rules read of the revision.
func (r *Revision) RevisionState() rules.RevisionState {
	return rules.RevisionState{Name: r.Name, Number: r.Spec.Number, Phase: string(r.Status.Phase)}
}

// RevisionList is a list of Revisions.
// +kubebuilder:object:root=true
type RevisionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Revision `json:"items"`
}
