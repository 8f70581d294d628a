package reconcilers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/scaling"
)

// createJob creates the FunctionJob name with spec in namespace ns.
func createJob(t *testing.T, ns, name string, spec v1.FunctionJobSpec) *v1.FunctionJob {
	t.Helper()
	fj := &v1.FunctionJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
	create(t, fj)
	return fj
}

func waitJobPhase(t *testing.T, fj *v1.FunctionJob, phase v1.JobPhase, runID int64) *v1.FunctionJob {
	t.Helper()
	got := &v1.FunctionJob{}
	eventually(t, fmt.Sprintf("job %s run %d in phase %s", fj.Name, runID, phase), func() error {
		if err := get(t, client.ObjectKeyFromObject(fj), got); err != nil {
			return err
		}
		if got.Status.Phase != phase || got.Status.ObservedRunID != runID || got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("status %+v", got.Status)
		}
		return nil
	})
	return got
}

func runJob(t *testing.T, fj *v1.FunctionJob) *batchv1.Job {
	t.Helper()
	job := &batchv1.Job{}
	key := client.ObjectKey{Namespace: fj.Namespace, Name: scaling.RunJobName(fj.Name, fj.Spec.RunID)}
	eventually(t, "run job "+key.Name, func() error { return get(t, key, job) })
	return job
}

func TestFunctionJobRunIDLifecycle(t *testing.T) {
	ns := newNamespace(t)
	fj := createJob(t, ns, "report", v1.FunctionJobSpec{
		FunctionRef: &v1.LocalObjectReference{Name: "worker"},
		Event:       &apiextensionsv1.JSON{Raw: []byte(`{"day":"mon"}`)},
	})
	// runID 0: created, not run.
	waitJobPhase(t, fj, v1.JobSkipped, 0)

	// runID 1 before the function exists: waits, then runs by itself once it is Ready.
	update(t, fj, func() { fj.Spec.RunID = 1 })
	waitJobPhase(t, fj, v1.JobPending, 1)
	fn := readyFunction(t, ns, "worker", "7")
	waitJobPhase(t, fj, v1.JobRunning, 1)
	job := runJob(t, fj)
	c := job.Spec.Template.Spec.Containers[0]
	if c.Image != fn.Status.Image {
		t.Errorf("run image %s, want the function's %s", c.Image, fn.Status.Image)
	}
	var event string
	for _, e := range c.Env {
		if e.Name == "SLESS_EVENT" {
			event = e.Value
		}
	}
	if event != `{"day":"mon"}` {
		t.Errorf("event %q", event)
	}
	finishJob(t, job, true, `{"rows":42}`)
	got := waitJobPhase(t, fj, v1.JobSucceeded, 1)
	if got.Status.Result != `{"rows":42}` || got.Status.DurationMillis != 2000 || got.Status.CompletionTime == nil {
		t.Errorf("status %+v", got.Status)
	}

	// Raising runID runs again; a failing run reports the handler's error.
	update(t, got, func() { got.Spec.RunID = 2 })
	fj.Spec.RunID = 2
	second := runJob(t, fj)
	if second.Name == job.Name {
		t.Fatal("the second run reused the first run's Job")
	}
	running := waitJobPhase(t, fj, v1.JobRunning, 2)
	if running.Status.Result != "" {
		t.Errorf("previous result kept in a new run: %q", running.Status.Result)
	}
	finishJob(t, second, false, `{"error":"division by zero"}`)
	failed := waitJobPhase(t, fj, v1.JobFailed, 2)
	if !strings.Contains(failed.Status.Error, "division by zero") {
		t.Errorf("error %q", failed.Status.Error)
	}
}

func TestSelfContainedJobBuildsThenRuns(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	fj := createJob(t, ns, "oneoff", v1.FunctionJobSpec{
		CodeSpec: v1.CodeSpec{Runtime: v1.RuntimePython311, TimeoutSeconds: 20},
		RunID:    1,
	})
	// Created before its code is uploaded: it waits, then builds once the source is set.
	waiting := waitJobPhase(t, fj, v1.JobPending, 1)
	update(t, waiting, func() {
		waiting.Spec.Source = &v1.SourceRef{ContextKey: "contexts/" + ns + "/oneoff/1.tar.gz", SHA256: sha("8")}
	})
	build := waitBuildJob(t, ns, "oneoff", "8")
	waitJobPhase(t, fj, v1.JobBuilding, 1)
	finishJob(t, build, true, "")
	waitJobPhase(t, fj, v1.JobRunning, 1)
	run := runJob(t, fj)
	if *run.Spec.ActiveDeadlineSeconds != 25 {
		t.Errorf("deadline %d", *run.Spec.ActiveDeadlineSeconds)
	}
	finishJob(t, run, true, `"done"`)
	got := waitJobPhase(t, fj, v1.JobSucceeded, 1)
	if got.Status.Result != `"done"` || got.Status.Image != builtImage(t, build) {
		t.Errorf("status %+v", got.Status)
	}

	// Deleting it removes its build Jobs (finalizer) and, through owner references, its runs.
	if err := env.Client.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	eventually(t, "job deleted", func() error { return isNotFound(get(t, client.ObjectKeyFromObject(fj), &v1.FunctionJob{})) })
	if n := len(buildJobs(t, ns, "oneoff", scaling.LabelJob)); n != 0 {
		t.Errorf("%d build jobs left", n)
	}
	if !metav1.IsControlledBy(run, got) {
		t.Errorf("run job not owned by the FunctionJob: %+v", run.OwnerReferences)
	}
}

func TestSelfContainedJobBuildFailure(t *testing.T) {
	ns := newNamespace(t)
	fj := createJob(t, ns, "badbuild", v1.FunctionJobSpec{
		CodeSpec: v1.CodeSpec{Runtime: v1.RuntimeNode20, Source: &v1.SourceRef{ContextKey: "contexts/" + ns + "/badbuild/1.tar.gz", SHA256: sha("9")}},
		RunID:    1,
	})
	finishJob(t, waitBuildJob(t, ns, "badbuild", "9"), false, "npm ERR! 404 Not Found - GET left-padd")
	got := waitJobPhase(t, fj, v1.JobFailed, 1)
	if !strings.Contains(got.Status.Error, "npm ERR! 404") {
		t.Errorf("error %q", got.Status.Error)
	}
}
