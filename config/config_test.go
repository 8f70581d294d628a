// Package config_test proves the install manifests build with kustomize and are accepted by a
// real API server, so a typo in config/ fails CI rather than an operator's install.
package config_test

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"sless.dev/sless/test/testenv"
)

// overlays are the kustomizations an operator installs.
var overlays = []string{"default", "samples"}

// build runs kustomize on config/<overlay> and returns its objects.
func build(t *testing.T, overlay string) []*unstructured.Unstructured {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), overlay)
	if err != nil {
		t.Fatalf("kustomize build config/%s: %v", overlay, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range res.Resources() {
		m, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs
}

// TestKustomizationsBuild: each overlay builds, puts every namespaced object in
// sless-system and holds the objects an install needs.
func TestKustomizationsBuild(t *testing.T) {
	for _, overlay := range overlays {
		t.Run(overlay, func(t *testing.T) {
			kinds := map[string]int{}
			for _, obj := range build(t, overlay) {
				kinds[obj.GetKind()]++
				if obj.GetKind() != "CustomResourceDefinition" && obj.GetNamespace() != "sless-system" && !clusterScoped(obj.GetKind()) {
					t.Errorf("%s %s is not in sless-system", obj.GetKind(), obj.GetName())
				}
			}
			for kind, want := range map[string]int{"CustomResourceDefinition": 4, "Deployment": 2, "ClusterRole": 3, "ClusterRoleBinding": 2, "ServiceAccount": 3, "Service": 1, "ConfigMap": 1} {
				if kinds[kind] != want {
					t.Errorf("%d %s objects, want %d", kinds[kind], kind, want)
				}
			}
		})
	}
}

// TestKustomizationsApply: a real API server accepts every object of each overlay (the
// namespace created, the rest server-side applied as a dry run).
func TestKustomizationsApply(t *testing.T) {
	env := testenv.ForTest(t)
	ctx := context.Background()
	for _, overlay := range overlays {
		t.Run(overlay, func(t *testing.T) {
			for _, obj := range build(t, overlay) {
				if obj.GetKind() == "Namespace" {
					if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("config-test"), client.ForceOwnership); err != nil {
						t.Fatalf("namespace: %v", err)
					}
					continue
				}
				if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("config-test"), client.ForceOwnership, client.DryRunAll); err != nil {
					t.Errorf("%s %s refused: %v", obj.GetKind(), obj.GetName(), err)
				}
			}
		})
	}
}

func clusterScoped(kind string) bool {
	return kind == "ClusterRole" || kind == "ClusterRoleBinding" || kind == "Namespace"
}
