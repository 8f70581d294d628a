package config_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// objects maps kind/namespace/name to an object decoded from YAML through JSON, so both
// renderers' output compares the same way (numbers, key order).
type objects map[string]map[string]any

func (o objects) add(t *testing.T, doc string) {
	t.Helper()
	if strings.TrimSpace(doc) == "" {
		return
	}
	j, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatalf("%v in\n%s", err, doc)
	}
	var m map[string]any
	if err := json.Unmarshal(j, &m); err != nil || m == nil {
		return // a template that rendered only comments
	}
	md, _ := m["metadata"].(map[string]any)
	o[m["kind"].(string)+"/"+str(md["namespace"])+"/"+str(md["name"])] = m
}

func str(v any) string { s, _ := v.(string); return s }

func (o objects) keys() []string {
	keys := make([]string, 0, len(o))
	for k := range o {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// kustomized renders an overlay like `kubectl apply -k`, without the Namespace, which
// `helm install --create-namespace` makes.
func kustomized(t *testing.T, dir string) objects {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	o := objects{}
	for _, r := range res.Resources() {
		if r.GetKind() == "Namespace" {
			continue
		}
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		o.add(t, string(y))
	}
	return o
}

// rendered renders the chart in dir like `helm install sless -n sless-system`, CRDs included.
func rendered(t *testing.T, dir string, values map[string]any) objects {
	t.Helper()
	ch, err := loader.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{Name: "sless", Namespace: "sless-system", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	o := objects{}
	for name, body := range files {
		if strings.HasSuffix(name, ".tpl") {
			continue
		}
		for _, doc := range releaseutil.SplitManifests(body) {
			o.add(t, doc)
		}
	}
	for _, crd := range ch.CRDObjects() {
		o.add(t, string(crd.File.Data))
	}
	return o
}

// diff reports the objects that differ between want (config/) and got (the chart).
func diff(t *testing.T, want, got objects) {
	t.Helper()
	for _, k := range want.keys() {
		if g, ok := got[k]; !ok {
			t.Errorf("the chart lacks %s", k)
		} else if !reflect.DeepEqual(want[k], g) {
			w, _ := yaml.Marshal(want[k])
			gy, _ := yaml.Marshal(g)
			t.Errorf("%s differs:\nconfig/:\n%s\nchart:\n%s", k, w, gy)
		}
	}
	for _, k := range got.keys() {
		if _, ok := want[k]; !ok {
			t.Errorf("the chart has %s, config/ does not", k)
		}
	}
}

// TestHelmChartMatchesConfig: with its default values the chart installs exactly what
// config/default does, so the two install paths cannot drift.
func TestHelmChartMatchesConfig(t *testing.T) {
	want := kustomized(t, "default")
	if len(want) < 10 {
		t.Fatalf("config/default rendered only %v", want.keys())
	}
	diff(t, want, rendered(t, "helm/sless", nil))
}

// TestHelmChartValues checks what the chart's values change.
func TestHelmChartValues(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	cases := map[string]struct {
		values             map[string]any
		image              string
		operatorArgs, miss []string
	}{
		"defaults": {image: "ghcr.io/sless-dev/sless:v0.1.0", miss: []string{"--registry=", "--kaniko-image="}},
		"by digest, own registry and kaniko": {
			values: map[string]any{"image": map[string]any{"repository": "registry.example/sless", "digest": digest},
				"operator": map[string]any{"registry": "registry.example/fn", "kanikoImage": "registry.example/kaniko@" + digest, "extraArgs": []any{"--registry-secret=push"}}},
			image:        "registry.example/sless@" + digest,
			operatorArgs: []string{"--registry=registry.example/fn", "--kaniko-image=registry.example/kaniko@" + digest, "--registry-secret=push"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := rendered(t, "helm/sless", tc.values)
			for _, d := range []string{"sless-operator", "sless-gateway"} {
				if img := container(t, o, d)["image"]; img != tc.image {
					t.Errorf("%s image %v, want %s", d, img, tc.image)
				}
			}
			args := strings.Join(toStrings(container(t, o, "sless-operator")["args"]), "\n") + "\n"
			for _, a := range tc.operatorArgs {
				if !strings.Contains(args, a+"\n") {
					t.Errorf("operator args %q lack %s", args, a)
				}
			}
			for _, a := range tc.miss {
				if strings.Contains(args, a) {
					t.Errorf("operator args %q have %s", args, a)
				}
			}
		})
	}
}

// TestConfigImage runs `make config-image` on a copy of config/: afterwards kustomize and the
// chart both install the pushed image by digest, and still the same objects.
func TestConfigImage(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("cp", "-r", ".", dir).CombinedOutput(); err != nil {
		t.Fatalf("copying config/: %v %s", err, out)
	}
	const ref = "registry.example:5000/team/sless:v1.2.3@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	refFile := filepath.Join(dir, "image.ref")
	if err := os.WriteFile(refFile, []byte(ref+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "--no-print-directory", "config-image", "CONFIG="+dir, "IMAGE_REF="+refFile)
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make config-image: %v\n%s", err, out)
	}
	want := "registry.example:5000/team/sless@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	k := kustomized(t, filepath.Join(dir, "default"))
	if img := container(t, k, "sless-operator")["image"]; img != want {
		t.Errorf("config/default installs %v, want %s", img, want)
	}
	diff(t, k, rendered(t, filepath.Join(dir, "helm", "sless"), nil))
}

// container is the first container of the Deployment name in sless-system.
func container(t *testing.T, o objects, name string) map[string]any {
	t.Helper()
	d, ok := o["Deployment/sless-system/"+name]
	if !ok {
		t.Fatalf("no Deployment %s in %v", name, o.keys())
	}
	spec := d["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	return spec["containers"].([]any)[0].(map[string]any)
}

func toStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}
