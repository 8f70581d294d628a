package scaling

import (
	"slices"
	"strings"
	"testing"

	v1 "sless.dev/sless/apis/v1alpha1"
)

// TestSameRun: what a revision snapshots is what makes a new one; scaling, async and
// traffic do not, nor a re-upload of the same source.
func TestSameRun(t *testing.T) {
	base := testFunction()
	rev := MakeRevision(base, 1)
	cases := map[string]struct {
		mut  func(*v1.Function)
		same bool
	}{
		"unchanged":                  {func(*v1.Function) {}, true},
		"scaling":                    {func(f *v1.Function) { f.Spec.Scale.MaxReplicas = 9 }, true},
		"async":                      {func(f *v1.Function) { f.Spec.Async.Enabled = true }, true},
		"traffic":                    {func(f *v1.Function) { f.Spec.Traffic = []v1.TrafficTarget{{Latest: true, Percent: 100}} }, true},
		"same source uploaded again": {func(f *v1.Function) { f.Spec.Source.ContextKey = "contexts/sless-abc/hello/2.tar.gz" }, true},
		"new source":                 {func(f *v1.Function) { f.Spec.Source.SHA256 = strings.Repeat("f", 64) }, false},
		"env":                        {func(f *v1.Function) { f.Spec.Env["ZED"] = "y" }, false},
		"memory":                     {func(f *v1.Function) { f.Spec.MemoryMB = 512 }, false},
		"timeout":                    {func(f *v1.Function) { f.Spec.TimeoutSeconds = 5 }, false},
		"entrypoint":                 {func(f *v1.Function) { f.Spec.Entrypoint = "main.run" }, false},
		"secret reference":           {func(f *v1.Function) { f.Spec.SecretEnv = []v1.SecretEnvVar{{Name: "K", Secret: "s", Key: "k"}} }, false},
		"image":                      {func(f *v1.Function) { f.Spec.Image = "ko.local/x:1" }, false},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			fn := testFunction(c.mut)
			if got := SameRun(rev, fn); got != c.same {
				t.Errorf("SameRun = %t, want %t", got, c.same)
			}
		})
	}
	if rev.Name != "hello-1" || rev.Spec.Function != "hello" || rev.OwnerReferences[0].Kind != "Function" {
		t.Errorf("revision %s of %s owned by %+v", rev.Name, rev.Spec.Function, rev.OwnerReferences)
	}
}

// TestDispatcherTargetsFollowTraffic: a trigger's dispatcher calls the revisions with a
// share, by the resolved traffic; a function without one is called on its own host.
func TestDispatcherTargetsFollowTraffic(t *testing.T) {
	fn := testFunction()
	tr := &v1.Trigger{Spec: v1.TriggerSpec{Type: v1.TriggerCron, FunctionRef: v1.LocalObjectReference{Name: fn.Name}, Cron: &v1.CronSpec{Schedule: "* * * * *"}}}
	tr.Name, tr.Namespace = "tick", fn.Namespace
	args := func() []string {
		return MakeCronJob(tr, fn, testOptions()).Spec.JobTemplate.Spec.Template.Spec.Containers[0].Args
	}
	if a := args(); !slices.Contains(a, "--target-host=hello.sless-abc.fn.sless.local") {
		t.Errorf("no revision yet: %v", a)
	}
	fn.Status.Traffic = []v1.ResolvedTrafficTarget{{Revision: "hello-1", Percent: 90}, {Revision: "hello-2", Latest: true, Percent: 10}, {Revision: "hello-3", Tag: "next"}}
	a := args()
	for _, want := range []string{"--target=hello-1.sless-abc.rev.fn.sless.local=90", "--target=hello-2.sless-abc.rev.fn.sless.local=10"} {
		if !slices.Contains(a, want) {
			t.Errorf("args %v lack %s", a, want)
		}
	}
	if slices.ContainsFunc(a, func(s string) bool { return strings.Contains(s, "hello-3") || strings.HasPrefix(s, "--target-host") }) {
		t.Errorf("a tag without a share or the function's host in %v", a)
	}
}
