// Package scheme builds the runtime.Scheme of every kind sless reads or writes: the core
// Kubernetes kinds, sless's own, KEDA's and the HTTP add-on's.
package scheme

import (
	httpv1alpha1 "github.com/kedacore/http-add-on/operator/apis/http/v1alpha1"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	slessv1alpha1 "sless.dev/sless/apis/v1alpha1"
)

// New returns a fresh scheme with every kind sless uses registered.
func New() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme,
		slessv1alpha1.AddToScheme,
		kedav1alpha1.AddToScheme,
		httpv1alpha1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}
