package reconcilers_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/util/retry"

	"github.com/google/go-containerregistry/pkg/authn"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/buildkit"
	"sless.dev/sless/history"
	"sless.dev/sless/reconcilers"
	"sless.dev/sless/rules"
	"sless.dev/sless/scaling"
	"sless.dev/sless/test/testenv"
)

var (
	env  *testenv.Env
	opts = scaling.DefaultOptions()
	// warmed holds the host and path of every request to the stand-in interceptor.
	warmed    sync.Map
	artifacts buildkit.Artifacts
	stopMgr   context.CancelFunc
	nsCounter atomic.Int32
	// testRegistry is the host:port of the in-process registry prebuilt images come from;
	// registryPaths are the paths it was asked for.
	testRegistry  string
	registryMu    sync.Mutex
	registryPaths []string
	// internalURL is a loopback service no registry setting names (an internal endpoint a
	// tenant must not reach through the operator); internalHits counts what reached it.
	internalURL  string
	internalHits atomic.Int32
)

// internalSecret is what the internal service answers: it must appear in no status or Event.
const internalSecret = "INTERNAL-SECRET-5d1c"

// redirectedRepo is a repository the test registry redirects to the internal service.
const redirectedRepo = "redirected"

func TestMain(m *testing.M) {
	if testenv.Short() { // make test-unit: no control plane, the pure tests alone
		os.Exit(m.Run())
	}
	opts.SlessImage = "registry.example/sless:test"
	opts.AsyncSecret = "sless-gateway"
	opts.IdentityMaster = []byte("reconcilers-test-master-32-bytes")
	// The interceptor the operator pre-warms functions through: it notes each request.
	interceptor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		warmed.Store(r.Host+r.URL.Path, time.Now())
	}))
	defer interceptor.Close()
	opts.InterceptorURL = interceptor.URL
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		internalHits.Add(1)
		http.Error(w, internalSecret, http.StatusNotFound)
	}))
	defer internal.Close()
	internalURL = internal.URL
	// The platform registry: builds push to it, prebuilt images' tags are resolved from it
	// (plain HTTP, as listed insecure). Under <ns>/redirected/ it redirects to the internal
	// service, as a hostile or compromised registry could.
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		registryMu.Lock()
		registryPaths = append(registryPaths, r.URL.Path)
		registryMu.Unlock()
		if strings.Contains(r.URL.Path, "/"+redirectedRepo+"/") {
			http.Redirect(w, r, internal.URL+r.URL.Path, http.StatusTemporaryRedirect)
			return
		}
		ggcrRegistry.ServeHTTP(w, r)
	}))
	defer reg.Close()
	testRegistry = strings.TrimPrefix(reg.URL, "http://")
	opts.Build.Registry = testRegistry
	opts.Build.InsecureRegistries = []string{testRegistry}
	// The artifact store as an in-cluster Service (TestBuildPodsNetworkPolicy creates it).
	opts.Build.S3Endpoint = "http://minio." + opts.Build.Namespace + ":9000"
	e, err := testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	env = e
	code := func() int {
		dir, err := os.MkdirTemp("", "sless-artifacts")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(dir)
		store, err := buildkit.NewFSStore(dir)
		if err != nil {
			panic(err)
		}
		artifacts = buildkit.Artifacts{Store: store}
		if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: opts.Build.Namespace}}); err != nil {
			panic(err)
		}
		*reconcilers.RetireGrace = 2 * time.Second // set before the reconcilers run
		if err := startManager(); err != nil {
			panic(err)
		}
		defer func() { stopMgr() }()
		return m.Run()
	}()
	_ = env.Stop()
	os.Exit(code)
}

// controllerConfig is the operator's, allowing a second manager in this process (the
// restart test starts one).
func controllerConfig() config.Controller {
	c := reconcilers.ControllerConfig()
	c.SkipNameValidation = ptr.To(true)
	return c
}

// startManager runs the operator's reconcilers in this process, as `sless operator` would.
func startManager() error {
	mgr, err := ctrl.NewManager(env.Config, manager.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             controllerConfig(),
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	cfg := reconcilers.Config{Options: opts, Artifacts: artifacts,
		SkipTagResolution: reconcilers.DefaultSkipTagResolution, AllowedRegistries: reconcilers.DefaultAllowedRegistries,
		Keychain: authn.NewMultiKeychain(), // anonymous
		History:  invocations}
	if err := reconcilers.Setup(ctx, mgr, cfg); err != nil {
		cancel()
		return err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	stopMgr = func() { cancel(); <-done }
	return nil
}

// invocations is the history rollouts are judged by: tests record the calls they pretend.
var invocations = history.NewMemory(10000)

// revisionKey names fn's n-th revision and the objects that run it.
func revisionKey(fn *v1.Function, n int64) client.ObjectKey {
	return client.ObjectKey{Namespace: fn.Namespace, Name: rules.RevisionName(fn.Name, n)}
}

// newNamespace gives each test its own tenant namespace.
func newNamespace(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("sless-test-%d", nsCounter.Add(1))
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	return name
}

// eventually polls cond until it returns nil or the timeout passes.
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: %v", what, err)
}

// create creates obj, failing the test if the API server refuses it.
func create(t *testing.T, obj client.Object) {
	t.Helper()
	testenv.Need(t) // every test's first object comes through here: under -short none runs
	if err := env.Client.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, key client.ObjectKey, obj client.Object) error {
	t.Helper()
	return env.Client.Get(context.Background(), key, obj)
}

// update applies mutate to the latest version of obj and writes it, retrying when a
// reconciler wrote in between (its status patches bump the resourceVersion too).
func update(t *testing.T, obj client.Object, mutate func()) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		mutate()
		return env.Client.Update(context.Background(), obj)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func sha(seed string) string { return strings.Repeat(seed, 64)[:64] }

func newFunction(ns, name, seed string) *v1.Function {
	return &v1.Function{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1.FunctionSpec{CodeSpec: v1.CodeSpec{
			Runtime: v1.RuntimeGo123,
			Env:     map[string]string{"GREETING": "hello"},
			Source:  &v1.SourceRef{ContextKey: "contexts/" + ns + "/" + name + "/1.tar.gz", SHA256: sha(seed)},
		}},
	}
}

// buildJobs lists the build Jobs of one function or job.
func buildJobs(t *testing.T, ns, name, label string) []batchv1.Job {
	t.Helper()
	var jobs batchv1.JobList
	if err := env.Client.List(context.Background(), &jobs, client.InNamespace(opts.Build.Namespace),
		client.MatchingLabels{scaling.LabelFunctionNamespace: ns, label: name}); err != nil {
		t.Fatal(err)
	}
	return jobs.Items
}

// waitBuildJob waits for the build Job of source seed.
func waitBuildJob(t *testing.T, ns, name, seed string) *batchv1.Job {
	t.Helper()
	job := &batchv1.Job{}
	key := client.ObjectKey{Namespace: opts.Build.Namespace, Name: scaling.BuildJobName(ns, name, sha(seed))}
	eventually(t, "build job "+key.Name, func() error { return get(t, key, job) })
	return job
}

// finishJob plays the Job controller and kubelet, which envtest does not run: a pod that ran
// and terminated with message, then the Job's terminal conditions. A build's pod ran its
// steps: a failed build failed in kaniko (failBuildStep names another step), a successful
// one's push step reports message, or builtImage(job) when message is empty.
func finishJob(t *testing.T, job *batchv1.Job, succeed bool, message string) {
	t.Helper()
	failed := ""
	if !succeed {
		failed = scaling.BuildKanikoContainer
	}
	finishPod(t, job, failed, message)
}

// failBuildStep fails the build job in step with message.
func failBuildStep(t *testing.T, job *batchv1.Job, step, message string) {
	t.Helper()
	finishPod(t, job, step, message)
}

// builtImage is what the fake push step of a build job reports: the destination's
// repository at a digest made of the job's name.
func builtImage(t *testing.T, job *batchv1.Job) string {
	t.Helper()
	for _, a := range job.Spec.Template.Spec.Containers[0].Args {
		if d, ok := strings.CutPrefix(a, "--destination="); ok {
			repo, _, _ := strings.Cut(d, ":sha-")
			sum := sha256.Sum256([]byte(job.Name))
			return repo + "@sha256:" + hex.EncodeToString(sum[:])
		}
	}
	t.Fatalf("job %s pushes nothing", job.Name)
	return ""
}

// finishPod runs job's pod to its end: every container (init containers first) succeeds up
// to failed, which exits 1 with message; the ones after it never start. With failed empty the
// last container's message is message (a build's: builtImage when empty).
func finishPod(t *testing.T, job *batchv1.Job, failed, message string) {
	t.Helper()
	ctx := context.Background()
	start := metav1.NewTime(time.Now().Add(-3 * time.Second).Truncate(time.Second))
	end := metav1.NewTime(start.Add(2 * time.Second)) // whole seconds: the API serializes times that way
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-" + string(job.UID)[:8], Namespace: job.Namespace, Labels: map[string]string{batchv1.ControllerUidLabel: string(job.UID)}},
		Spec:       job.Spec.Template.Spec,
	}
	create(t, pod)
	build := len(pod.Spec.InitContainers) > 0
	if build && failed == "" && message == "" {
		message = builtImage(t, job)
	}
	pod.Status.Phase = corev1.PodSucceeded
	if failed != "" {
		pod.Status.Phase = corev1.PodFailed
	}
	ended := false
	status := func(c corev1.Container, last bool) corev1.ContainerStatus {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image}
		term := &corev1.ContainerStateTerminated{StartedAt: start, FinishedAt: end}
		switch {
		case ended:
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "PodInitializing"}
			return cs
		case c.Name == failed:
			term.ExitCode, term.Message, ended = 1, message, true
		case failed == "" && last:
			term.Message = message
		}
		cs.State.Terminated = term
		return cs
	}
	for _, c := range pod.Spec.InitContainers {
		pod.Status.InitContainerStatuses = append(pod.Status.InitContainerStatuses, status(c, false))
	}
	for i, c := range pod.Spec.Containers {
		if failed != "" && !build {
			failed = c.Name // a run Job's one container
		}
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, status(c, i == len(pod.Spec.Containers)-1))
	}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	succeed := failed == ""
	now := metav1.Now()
	if err := get(t, client.ObjectKeyFromObject(job), job); err != nil {
		t.Fatal(err)
	}
	job.Status.StartTime = &start
	if succeed {
		job.Status.Succeeded = 1
		job.Status.CompletionTime = &end
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
	} else {
		job.Status.Failed = 1
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastTransitionTime: now},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastTransitionTime: now},
		}
	}
	if err := env.Client.Status().Update(ctx, job); err != nil {
		t.Fatalf("finishing job %s: %v", job.Name, err)
	}
}

// waitFunction waits until the function's status, for its current generation, is in phase.
func waitFunction(t *testing.T, fn *v1.Function, phase v1.FunctionPhase) *v1.Function {
	t.Helper()
	got := &v1.Function{}
	eventually(t, fmt.Sprintf("function %s in phase %s", fn.Name, phase), func() error {
		if err := get(t, client.ObjectKeyFromObject(fn), got); err != nil {
			return err
		}
		if got.Status.Phase != phase || got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("phase %q observedGeneration %d generation %d conditions %+v", got.Status.Phase, got.Status.ObservedGeneration, got.Generation, got.Status.Conditions)
		}
		return nil
	})
	return got
}

// readyFunction creates a function and completes its build.
func readyFunction(t *testing.T, ns, name, seed string) *v1.Function {
	t.Helper()
	fn := newFunction(ns, name, seed)
	create(t, fn)
	finishJob(t, waitBuildJob(t, ns, name, seed), true, "")
	return waitFunction(t, fn, v1.FunctionReady)
}

func isNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err == nil {
		return fmt.Errorf("still exists")
	}
	return err
}
