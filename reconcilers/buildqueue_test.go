package reconcilers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/scaling"
)

// TestBuildQueue: with --max-concurrent-builds, builds beyond the cap wait in the operator
// (no Job, so no deadline spent) with their place in the status, start oldest first when a
// build ends — woken by the Job's change, well before the 30 s recheck — and a deleted
// object gives its place up.
func TestBuildQueue(t *testing.T) {
	ns := newNamespace(t)
	// Builds other tests left running count against the cap too.
	var jobs batchv1.JobList
	if err := env.Client.List(context.Background(), &jobs, client.InNamespace(opts.Build.Namespace), client.HasLabels{scaling.LabelSource}); err != nil {
		t.Fatal(err)
	}
	unfinished := 0
	for _, j := range jobs.Items {
		if len(j.Status.Conditions) == 0 {
			unfinished++
		}
	}
	restart := func(max int) {
		stopMgr()
		opts.Build.MaxConcurrent = max
		if err := startManager(); err != nil {
			t.Fatal(err)
		}
	}
	restart(unfinished + 2)
	t.Cleanup(func() { restart(0) })

	a, b := newFunction(ns, "a", "a"), newFunction(ns, "b", "b")
	create(t, a)
	jobA := waitBuildJob(t, ns, "a", "a")
	create(t, b)
	jobB := waitBuildJob(t, ns, "b", "b")
	// Queued in this order: c, x (deleted while waiting), then the self-contained job d.
	c, x := newFunction(ns, "c", "c"), newFunction(ns, "x", "e")
	create(t, c)
	queued := waitQueued(t, c)
	if !strings.Contains(queued, "0 waiting ahead") {
		t.Errorf("c's place: %q", queued)
	}
	create(t, x)
	if queued := waitQueued(t, x); !strings.Contains(queued, "1 waiting ahead") {
		t.Errorf("x's place: %q", queued)
	}
	d := createJob(t, ns, "d", v1.FunctionJobSpec{
		CodeSpec: v1.CodeSpec{Runtime: v1.RuntimePython311, Source: &v1.SourceRef{ContextKey: "contexts/" + ns + "/d/1.tar.gz", SHA256: sha("d")}},
		RunID:    1,
	})
	eventually(t, "job d queued", func() error {
		got := &v1.FunctionJob{}
		if err := get(t, client.ObjectKeyFromObject(d), got); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionSucceeded); got.Status.Phase != v1.JobBuilding || c == nil || !strings.Contains(c.Message, "2 waiting ahead") {
			return fmt.Errorf("status %+v", got.Status)
		}
		return nil
	})
	if err := env.Client.Delete(context.Background(), x); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the queue holds: nothing more starts
	for _, name := range []string{"c", "x"} {
		if n := len(buildJobs(t, ns, name, scaling.LabelFunction)); n != 0 {
			t.Fatalf("%s has %d build jobs while the cap is reached", name, n)
		}
	}

	start := time.Now()
	finishJob(t, jobA, true, "")
	jobC := waitBuildJob(t, ns, "c", "c")
	if n := len(buildJobs(t, ns, "d", scaling.LabelJob)); n != 0 {
		t.Errorf("d started before c had: %d build jobs", n)
	}
	finishJob(t, jobB, true, "")
	jobD := waitBuildJob(t, ns, "d", "d")
	if waited := time.Since(start); waited > 15*time.Second {
		t.Errorf("the queue moved in %s: by its recheck, not by the builds' ends", waited)
	}
	finishJob(t, jobC, true, "")
	finishJob(t, jobD, true, "")
	waitFunction(t, c, v1.FunctionReady)
	waitJobPhase(t, d, v1.JobRunning, 1)
}

// waitQueued waits until fn's build waits for a slot and returns the status message.
func waitQueued(t *testing.T, fn *v1.Function) string {
	t.Helper()
	var msg string
	eventually(t, fn.Name+" queued", func() error {
		got := &v1.Function{}
		if err := get(t, client.ObjectKeyFromObject(fn), got); err != nil {
			return err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionBuilt)
		if got.Status.Phase != v1.FunctionBuilding || c == nil || !strings.HasPrefix(c.Message, "waiting for a build slot") {
			return fmt.Errorf("status %+v", got.Status)
		}
		msg = c.Message
		return nil
	})
	return msg
}
