// Package v1alpha1 holds the sless API: Function, Trigger and FunctionJob.
// +kubebuilder:object:generate=true
// +groupName=sless.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of every sless kind.
	GroupVersion = schema.GroupVersion{Group: "sless.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the sless kinds with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the sless kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Function{}, &FunctionList{}, &Trigger{}, &TriggerList{}, &FunctionJob{}, &FunctionJobList{}, &Revision{}, &RevisionList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
