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

func TestKustomizationsApply(t *testing.T) {
	testenv.Need(t)
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	ctx := context.Background()
	for _, overlay := range []string{"default", "samples"} {
		t.Run(overlay, func(t *testing.T) {
			res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), overlay)
			if err != nil {
				t.Fatalf("kustomize build config/%s: %v", overlay, err)
			}
			kinds := map[string]int{}
			for _, r := range res.Resources() {
				m, err := r.Map()
				if err != nil {
					t.Fatal(err)
				}
				obj := &unstructured.Unstructured{Object: m}
				kinds[obj.GetKind()]++
				if obj.GetKind() == "Namespace" {
					if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("config-test"), client.ForceOwnership); err != nil {
						t.Fatalf("namespace: %v", err)
					}
					continue
				}
				if obj.GetKind() != "CustomResourceDefinition" && obj.GetNamespace() != "sless-system" && !clusterScoped(obj.GetKind()) {
					t.Errorf("%s %s is not in sless-system", obj.GetKind(), obj.GetName())
				}
				if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("config-test"), client.ForceOwnership, client.DryRunAll); err != nil {
					t.Errorf("%s %s refused: %v", obj.GetKind(), obj.GetName(), err)
				}
			}
			for kind, want := range map[string]int{"CustomResourceDefinition": 3, "Deployment": 2, "ClusterRole": 2, "ClusterRoleBinding": 2, "ServiceAccount": 2, "Service": 1, "ConfigMap": 1} {
				if kinds[kind] != want {
					t.Errorf("%d %s objects, want %d", kinds[kind], kind, want)
				}
			}
		})
	}
}

func clusterScoped(kind string) bool {
	return kind == "ClusterRole" || kind == "ClusterRoleBinding" || kind == "Namespace"
}
