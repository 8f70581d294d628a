// Command operator measures the control plane at scale: N Functions created at once in a
// real API server (envtest) reach Ready while this program plays kaniko by completing every
// build Job it sees. It reports wall time, reconciles and API requests per function, the
// reconcile rate at steady state and the heap, next to a baseline measured in the same run:
// the same API server writing the N Functions and N Deployments directly, with no operator.
//
//	go run ./test/bench/operator -n 1000
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/reconcilers"
	"sless.dev/sless/scaling"
	"sless.dev/sless/test/testenv"
)

func main() {
	n := flag.Int("n", 1000, "functions to create")
	workers := flag.Int("workers", 32, "concurrent creators")
	flag.Parse()
	if err := run(*n, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// countingTransport counts the operator's API requests, in total and by method and resource.
type countingTransport struct {
	next http.RoundTripper
	n    *atomic.Int64
}

var (
	byKindMu sync.Mutex
	byKind   = map[string]int{}
)

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.n.Add(1)
	kind := resourceOf(r.URL.Path)
	if r.URL.Query().Get("watch") == "true" {
		kind += "?watch"
	}
	byKindMu.Lock()
	byKind[r.Method+" "+kind]++
	byKindMu.Unlock()
	resp, err := t.next.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusConflict {
		conflicts.Add(1)
	}
	return resp, err
}

// conflicts counts the operator's requests answered 409 Conflict.
var conflicts atomic.Int64

// resourceOf names the resource (and subresource) a request path addresses.
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i, p := range parts {
		if p == "namespaces" && i+2 < len(parts) {
			rest := parts[i+2:] // resource [name [subresource]]
			if len(rest) == 3 {
				return rest[0] + "/" + rest[2]
			}
			return rest[0]
		}
	}
	return parts[len(parts)-1]
}

func run(n, workers int) error {
	log.SetLogger(logr.Discard())
	env, err := testenv.Start()
	if err != nil {
		return err
	}
	defer env.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := env.Client
	opts := scaling.DefaultOptions()
	opts.SlessImage = "registry.example/sless:bench"
	opts.IdentityMaster = []byte("operator-bench-master-of-32-byte")
	for _, ns := range []string{"bench-baseline", "bench", opts.Build.Namespace} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
	}

	// Baseline: the API work itself — N Functions, their first Revisions and Deployments
	// written directly.
	start := time.Now()
	if err := parallel(n, workers, func(i int) error {
		fn := function("bench-baseline", i)
		if err := c.Create(ctx, fn); err != nil {
			return err
		}
		rev := scaling.MakeRevision(fn, 1)
		if err := c.Create(ctx, rev); err != nil {
			return err
		}
		rev.Status.Image = "img"
		return c.Create(ctx, scaling.MakeDeployment(fn, rev, nil, opts))
	}); err != nil {
		return err
	}
	baseline := time.Since(start)
	fmt.Fprintf(os.Stderr, "baseline: %d functions + revisions + deployments written in %s\n", n, baseline.Round(time.Millisecond))

	var apiCalls atomic.Int64
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt, &apiCalls} }
	// The operator watches only the measured namespace (and its build namespace): the
	// baseline's Functions are not its work.
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: reconcilers.ControllerConfig(),
		Cache:      cache.Options{DefaultNamespaces: map[string]cache.Config{"bench": {}, opts.Build.Namespace: {}}}})
	if err != nil {
		return err
	}
	if err := reconcilers.Setup(ctx, mgr, reconcilers.Config{Options: opts}); err != nil {
		return err
	}
	go func() { _ = mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return fmt.Errorf("cache did not sync")
	}
	reconcilesBefore := reconcileTotal()
	callsBefore := apiCalls.Load()

	start = time.Now()
	go playKaniko(ctx, c, opts.Build.Namespace)
	if err := parallel(n, workers, func(i int) error { return c.Create(ctx, function("bench", i)) }); err != nil {
		return err
	}
	lastReport := time.Now()
	for ready := 0; ready < n; {
		time.Sleep(200 * time.Millisecond)
		var list v1.FunctionList
		if err := c.List(ctx, &list, client.InNamespace("bench")); err != nil {
			return err
		}
		ready = 0
		phases := map[v1.FunctionPhase]int{}
		var sample string
		for _, f := range list.Items {
			phases[f.Status.Phase]++
			if f.Status.Phase == v1.FunctionReady && f.Status.ObservedGeneration == f.Generation {
				ready++
			} else if sample == "" && len(f.Status.Conditions) > 0 {
				sample = f.Name + ": " + f.Status.Conditions[len(f.Status.Conditions)-1].Message
			}
		}
		if time.Since(lastReport) > 10*time.Second {
			fmt.Fprintf(os.Stderr, "%s: %d of %d Ready %v, %d reconciles; e.g. %s\n", time.Since(start).Round(time.Second), ready, n, phases, reconcileTotal()-reconcilesBefore, sample)
			lastReport = time.Now()
		}
		if time.Since(start) > 10*time.Minute {
			return fmt.Errorf("only %d of %d functions Ready after 10 minutes", ready, n)
		}
	}
	wall := time.Since(start)
	reconciles := reconcileTotal() - reconcilesBefore
	calls := apiCalls.Load() - callsBefore

	// Steady state: nothing changes, so nothing should reconcile.
	time.Sleep(3 * time.Second)
	settled := reconcileTotal()
	time.Sleep(10 * time.Second)
	steady := float64(reconcileTotal()-settled) / 10

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)

	fmt.Printf("functions                     %d\n", n)
	fmt.Printf("baseline (direct API writes)  %s\n", baseline.Round(time.Millisecond))
	fmt.Printf("operator: all Ready           %s (%.2fx the baseline)\n", wall.Round(time.Millisecond), wall.Seconds()/baseline.Seconds())
	fmt.Printf("reconciles per function       %.2f\n", float64(reconciles)/float64(n))
	byKindMu.Lock()
	events := byKind["POST events"]
	byKindMu.Unlock()
	fmt.Printf("API requests per function     %.2f (%.2f on objects, %.2f Events)\n", float64(calls)/float64(n), float64(calls-int64(events))/float64(n), float64(events)/float64(n))
	fmt.Printf("conflicts (409 answers)       %d\n", conflicts.Load())
	fmt.Printf("steady-state reconciles/s     %.2f\n", steady)
	byKindMu.Lock()
	fmt.Printf("API requests by kind          %v\n", byKind)
	byKindMu.Unlock()
	fmt.Printf("reconciles by controller      %s\n", reconcileBreakdown())
	fmt.Printf("heap in use after GC          %.1f MB (bench process: operator + clients)\n", float64(ms.HeapInuse)/1e6)
	return nil
}

func function(ns string, i int) *v1.Function {
	sha := fmt.Sprintf("%064x", i+1)
	return &v1.Function{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fn-%04d", i), Namespace: ns},
		Spec: v1.FunctionSpec{CodeSpec: v1.CodeSpec{
			Runtime: v1.RuntimePython311, Env: map[string]string{"I": fmt.Sprint(i)},
			Source: &v1.SourceRef{ContextKey: fmt.Sprintf("contexts/%s/fn-%04d/1.tar.gz", ns, i), SHA256: sha},
		}},
	}
}

// playKaniko completes every build Job as the Job controller would after a successful build.
func playKaniko(ctx context.Context, c client.Client, ns string) {
	for ctx.Err() == nil {
		var jobs batchv1.JobList
		if err := c.List(ctx, &jobs, client.InNamespace(ns)); err == nil {
			_ = parallel(len(jobs.Items), 16, func(i int) error {
				j := &jobs.Items[i]
				if len(j.Status.Conditions) > 0 {
					return nil
				}
				now := metav1.Now()
				j.Status.StartTime, j.Status.CompletionTime, j.Status.Succeeded = &now, &now, 1
				j.Status.Conditions = []batchv1.JobCondition{
					{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
					{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
				}
				return c.Status().Update(ctx, j)
			})
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func parallel(n, workers int, f func(int) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	next := atomic.Int64{}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// reconcileTotal sums controller-runtime's reconcile counter over sless's controllers.
func reconcileTotal() int64 {
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		return 0
	}
	var total float64
	for _, mf := range mfs {
		if mf.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range mf.Metric {
			if isSless(m) {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return int64(total)
}

func isSless(m *dto.Metric) bool {
	for _, l := range m.Label {
		if l.GetName() == "controller" && strings.Contains("function trigger functionjob", l.GetValue()) {
			return true
		}
	}
	return false
}

// reconcileBreakdown lists reconcile counts by controller and result.
func reconcileBreakdown() string {
	mfs, _ := metrics.Registry.Gather()
	var parts []string
	for _, mf := range mfs {
		if mf.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range mf.Metric {
			if !isSless(m) || m.GetCounter().GetValue() == 0 {
				continue
			}
			var ctrlName, result string
			for _, l := range m.Label {
				switch l.GetName() {
				case "controller":
					ctrlName = l.GetValue()
				case "result":
					result = l.GetValue()
				}
			}
			parts = append(parts, fmt.Sprintf("%s/%s=%d", ctrlName, result, int64(m.GetCounter().GetValue())))
		}
	}
	return strings.Join(parts, " ")
}
