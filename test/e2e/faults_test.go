//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/test/images"
)

// waitPhase waits until the function is in phase (Failed or Ready, passing through others)
// and returns its status message.
func waitPhase(t *testing.T, tn tenant, name, phase string, within time.Duration) string {
	t.Helper()
	var fn api.Function
	waitFor(t, within, "function "+name+" "+phase, func() bool {
		var err error
		fn, err = tn.c.GetFunction(context.Background(), tn.ns, name)
		return err == nil && fn.Status.Phase == phase
	})
	return fn.Status.Message
}

// TestBuildFailures: sources kaniko cannot build leave the Function Failed with kaniko's own
// error tail in the API's status message, the words the user needs to fix them.
func TestBuildFailures(t *testing.T) {
	t.Parallel()
	tn := newTenant(t)
	cases := map[string]struct {
		files map[string]string
		want  []string
	}{
		"python syntax error": {files: map[string]string{"handler.py": "def handle(event:\n    return 1\n"},
			want: []string{"SyntaxError", "handler.py", "exit status 1"}},
		"missing dependency": {files: map[string]string{"handler.py": helloPython, "requirements.txt": "./wheels/sless_missing-1.0-py3-none-any.whl\n"},
			want: []string{"sless_missing-1.0-py3-none-any.whl", "exit status 1"}},
	}
	for name, tc := range cases {
		fn := strings.ReplaceAll(name, " ", "-")
		createAndUpload(t, tn, fn, helloFields(5), tc.files)
		defer func() {
			msg := waitBuilt(t, tn, fn, "Failed", buildTimeout, func(f api.Function) bool { return f.Status.Phase == "Failed" }).Status.Message
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%s: status message lacks %q:\n%s", name, w, msg)
				}
			}
		}()
	}
}

// TestRegistryOutage: while the registry is down a build fails, the Function says which
// registry it could not reach, and once the registry is back the retried build succeeds and
// the function answers. Serial: the other journeys need the registry.
func TestRegistryOutage(t *testing.T) {
	tn := newTenant(t)
	// The outage is the destination's: the executor and the platform image (the build's fetch
	// and push steps) are on the nodes already, as on any cluster that has built before (and
	// usually from another registry). This journey may be the suite's first build.
	for _, img := range []string{g.kanikoImage, g.platformImage} {
		if _, _, err := g.kubelets[0].rt.pull(context.Background(), img); err != nil {
			t.Fatalf("pre-pull %s: %v", img, err)
		}
	}
	g.reg.Stop()
	restarted := false
	defer func() {
		if !restarted {
			_ = g.reg.Restart()
		}
	}()
	createAndUpload(t, tn, "outage", helloFields(5), map[string]string{"handler.py": helloPython + "# built during an outage\n"})
	msg := waitPhase(t, tn, "outage", "Failed", 3*time.Minute)
	if !strings.Contains(msg, "registry "+registry+" is unreachable") {
		t.Errorf("status message does not name the registry:\n%s", msg)
	}
	if err := g.reg.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	back := time.Now()
	waitPhase(t, tn, "outage", "Ready", 3*time.Minute) // through the operator's retries
	t.Logf("registry back → Ready in %s", time.Since(back).Round(time.Second))
	waitServiceResolvable(t, tn, "outage")
	resp, body := invoke(t, tn, "outage", `{"name": "outage"}`)
	checkHello(t, resp, body, "outage")
}

// TestUnpullableImage: a Function whose image cannot be pulled is never a silent Ready. A
// tag its registry does not serve is known at creation, with min_replicas 0 and no pod to try:
// the operator resolves every prebuilt tag to a digest (Knative's tag-to-digest resolution)
// and says ImageUnresolvable; pushed later, the tag is resolved on the operator's retry and
// runs by digest. An image the operator does not resolve (a registry listed in
// --registries-skipping-tag-resolving) is caught by its first pod's ErrImagePull /
// ImagePullBackOff.
func TestUnpullableImage(t *testing.T) {
	t.Parallel()
	tn := newTenant(t)
	ctx := context.Background()
	late := registry + "/" + tn.ns + "/late:1"
	fields := helloFields(5)
	fields.Image = ptr.To(late) // min_replicas 0: no pod pulls it
	if _, err := tn.c.CreateFunction(ctx, tn.ns, api.CreateFunction{Name: "unresolvable", FunctionFields: fields}); err != nil {
		t.Fatal(err)
	}
	msg := waitPhase(t, tn, "unresolvable", "Failed", time.Minute)
	if !strings.Contains(msg, "cannot fetch image "+late+" from its registry") {
		t.Errorf("status message does not tell the image cannot be fetched:\n%s", msg)
	}
	var fn v1.Function
	if err := g.client.Get(ctx, client.ObjectKey{Namespace: tn.ns, Name: "unresolvable"}, &fn); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(fn.Status.Conditions, v1.ConditionBuilt); c == nil || c.Reason != v1.ReasonImageUnresolvable {
		t.Errorf("Built condition %+v, want %s", c, v1.ReasonImageUnresolvable)
	}

	ref, err := images.Ref(late)
	if err != nil {
		t.Fatal(err)
	}
	img, err := random.Image(1024, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx), g.reg.Auth()); err != nil {
		t.Fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	pushed := time.Now()
	waitPhase(t, tn, "unresolvable", "Ready", time.Minute) // no spec change: the operator's retry
	t.Logf("tag pushed → Ready in %s", time.Since(pushed).Round(time.Second))
	got, err := tn.c.GetFunction(ctx, tn.ns, "unresolvable")
	if err != nil {
		t.Fatal(err)
	}
	if want := ref.Context().Name() + "@" + digest.String(); got.Status.Image != want {
		t.Errorf("status.image %q, want the tag's digest %q", got.Status.Image, want)
	}

	fields = helloFields(5)
	fields.Image, fields.MinReplicas = ptr.To("ko.local/nowhere/missing:1"), ptr.To(int32(1))
	if _, err := tn.c.CreateFunction(ctx, tn.ns, api.CreateFunction{Name: "unpullable", FunctionFields: fields}); err != nil {
		t.Fatal(err)
	}
	msg = waitPhase(t, tn, "unpullable", "Failed", 2*time.Minute)
	if !strings.Contains(msg, "ErrImagePull") && !strings.Contains(msg, "ImagePullBackOff") || !strings.Contains(msg, "nowhere/missing") {
		t.Errorf("status message does not tell the image cannot be pulled:\n%s", msg)
	}
	// Its pod would go on pulling (and logging) for the rest of the suite.
	for _, name := range []string{"unresolvable", "unpullable"} {
		if err := tn.c.DeleteFunction(ctx, tn.ns, name); err != nil {
			t.Error(err)
		}
	}
}
