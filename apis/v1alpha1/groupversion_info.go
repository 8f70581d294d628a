// Package v1alpha1 holds the sless API: Function, Trigger and FunctionJob.
// +kubebuilder:object:generate=true
// +groupName=sless.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of every sless kind.
	GroupVersion = schema.GroupVersion{Group: "sless.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the sless kinds with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the sless kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
