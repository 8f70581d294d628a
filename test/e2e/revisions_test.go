//go:build e2e

package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
)

// versionedPython answers its revision's VERSION; with FAIL_EVERY=n every n-th call of a
// process fails with a 500.
const versionedPython = `import itertools, os
calls = itertools.count()

def handle(event, request=None):
    every = int(os.environ.get("FAIL_EVERY", "0"))
    if every and next(calls) % every == 0:
        return {"statusCode": 500, "body": "failing on purpose"}
    return {"version": os.environ.get("VERSION", "")}
`

// revisionCaller calls a function through the gateway and counts who answered.
type revisionCaller struct {
	t      *testing.T
	url    string
	client *http.Client

	mu       sync.Mutex
	served   map[string]int // revision → 2xx answers
	failed   map[string]int // revision → other answers
	lastSeen map[string]time.Time
}

func newRevisionCaller(t *testing.T, tn tenant, name string) *revisionCaller {
	return &revisionCaller{t: t, url: g.gatewayURL + "/fn/" + tn.ns + "/" + name, client: &http.Client{Timeout: time.Minute},
		served: map[string]int{}, failed: map[string]int{}, lastSeen: map[string]time.Time{}}
}

// call makes one call (with a tag when given) and answers the revision that served it.
func (c *revisionCaller) call(tag string) (string, int) {
	req, _ := http.NewRequest(http.MethodPost, c.url, strings.NewReader(`{}`))
	if tag != "" {
		req.Header.Set(rules.HeaderTag, tag)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		c.t.Errorf("call: %v", err)
		return "", 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	rev := resp.Header.Get(rules.HeaderRevision)
	c.mu.Lock()
	if resp.StatusCode/100 == 2 {
		c.served[rev]++
	} else {
		c.failed[rev]++
	}
	c.lastSeen[rev] = time.Now()
	c.mu.Unlock()
	return rev, resp.StatusCode
}

// load calls at rate per second until stop is closed.
func (c *revisionCaller) load(rate int, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(rate))
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				wg.Add(1)
				go func() { defer wg.Done(); c.call("") }()
			}
		}
	}()
	return &wg
}

func (c *revisionCaller) counts() (served, failed map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	served, failed = map[string]int{}, map[string]int{}
	for k, v := range c.served {
		served[k] = v
	}
	for k, v := range c.failed {
		failed[k] = v
	}
	return served, failed
}

func (c *revisionCaller) reset() {
	c.mu.Lock()
	c.served, c.failed, c.lastSeen = map[string]int{}, map[string]int{}, map[string]time.Time{}
	c.mu.Unlock()
}

// TestRevisionsOnTheCluster is issue 28's journey on the real KEDA and add-on: two
// revisions of a kaniko-built function at 50/50, each scaled up from zero on its own; a tag
// that reaches only its revision; `sless rollback` under load moving every call within 2 s
// with no failed call; a revision failing half its calls rolled back by the health-gated
// rollout after its first step; revisions beyond the history limit collected with their
// objects.
func TestRevisionsOnTheCluster(t *testing.T) {
	t.Parallel()
	tn := newTenant(t)
	ctx := context.Background()
	fields := helloFields(60)
	fields.EnvVars = &map[string]string{"VERSION": "one"}
	deployShared(t, tn, "canary", fields, map[string]string{"handler.py": versionedPython})
	rw1 := watchReplicas(t, tn.ns, "canary")
	if d := deployment(t, tn.ns, "canary"); *d.Spec.Replicas != 0 {
		t.Fatalf("revision 1 starts with %d replicas, want 0", *d.Spec.Replicas)
	}

	// Revision 2 (new env, same image: no build) beside revision 1 at 50/50, tagged canary.
	split := []api.TrafficTarget{{Revision: "canary-1", Percent: 50}, {Latest: true, Percent: 50, Tag: "canary"}}
	fn, err := tn.c.UpdateFunction(ctx, tn.ns, "canary", api.FunctionFields{EnvVars: &map[string]string{"VERSION": "two"}, Traffic: &split})
	if err != nil {
		t.Fatal(err)
	}
	fn = waitBuilt(t, tn, "canary", "both revisions serving", 2*time.Minute, func(f api.Function) bool {
		return len(f.Status.Traffic) == 2 && f.Status.Traffic[1].Revision == "canary-2"
	})
	waitServiceResolvable(t, tn, "canary") // canary-2's objects
	rw2 := watchReplicas(t, tn.ns, "canary")
	t0 := time.Now()
	c := newRevisionCaller(t, tn, "canary")
	var wg sync.WaitGroup
	var next atomic.Int32
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= 1000 {
				c.call("")
			}
		}()
	}
	wg.Wait()
	served, failed := c.counts()
	t.Logf("1,000 calls at 50/50: %v (failed %v)", served, failed)
	// Binomial(1000, 0.5) within its 99.9 % bound: 500 ± 3.29·√250 ≈ 500 ± 52.
	if len(failed) != 0 || served["canary-1"]+served["canary-2"] != 1000 || served["canary-1"] < 448 || served["canary-1"] > 552 {
		t.Errorf("split %v, failed %v: want 1,000 answers within 448..552 each", served, failed)
	}
	for i, rw := range []*replicaWatch{rw1, rw2} {
		if _, ok := rw.scaledUpAfter(t0); !ok {
			t.Errorf("revision %d was not scaled up from zero by its own HTTPScaledObject", i+1)
		}
	}
	for range 20 {
		if rev, code := c.call("canary"); rev != "canary-2" || code != http.StatusOK {
			t.Fatalf("tag canary answered by %q (%d)", rev, code)
		}
	}

	// `sless rollback` under 60 calls a second: every call on canary-1 within 2 s, none failed.
	cli, work := loggedIn(t, tn)
	c.reset()
	stop := make(chan struct{})
	loading := c.load(60, stop)
	time.Sleep(3 * time.Second)
	if out, _ := cli.ok(work, "rollback", "canary"); !strings.Contains(out, "canary-1") {
		t.Errorf("sless rollback said %q", out)
	}
	rolledBack := time.Now()
	time.Sleep(4 * time.Second)
	close(stop)
	loading.Wait()
	c.mu.Lock()
	moved := c.lastSeen["canary-2"].Sub(rolledBack)
	c.mu.Unlock()
	served, failed = c.counts()
	t.Logf("rollback under 60 calls/s: canary-2's last answer %s after sless rollback returned; %v, failed %v", fmtDur(moved), served, failed)
	if len(failed) != 0 || moved > 2*time.Second {
		t.Errorf("rollback: canary-2 answered until %s after the rollback, failed %v; want within 2 s and none", moved, failed)
	}

	// A revision failing half its calls, under a health-gated rollout: rolled back at its
	// first step, its failures bounded by that step's share.
	rollout := api.Rollout{Steps: []int32{10, 100}, IntervalSec: 10, MaxErrorRate: 0.2, MinRequests: 20}
	latest := []api.TrafficTarget{{Latest: true, Percent: 100}}
	if _, err := tn.c.UpdateFunction(ctx, tn.ns, "canary", api.FunctionFields{Traffic: &latest, Rollout: &rollout}); err != nil {
		t.Fatal(err)
	}
	waitBuilt(t, tn, "canary", "canary-2 serving everything", time.Minute, func(f api.Function) bool {
		return len(f.Status.Traffic) == 1 && f.Status.Traffic[0].Revision == "canary-2"
	})
	c.reset()
	stop = make(chan struct{})
	loading = c.load(50, stop)
	if _, err := tn.c.UpdateFunction(ctx, tn.ns, "canary", api.FunctionFields{EnvVars: &map[string]string{"VERSION": "three", "FAIL_EVERY": "2"}}); err != nil {
		t.Fatal(err)
	}
	fn = waitBuilt(t, tn, "canary", "the rollout of canary-3 rolled back", 2*time.Minute, func(f api.Function) bool {
		return f.Status.Rollout != nil && f.Status.Rollout.Revision == "canary-3" && f.Status.Rollout.Phase == api.RolloutRolledBack
	})
	time.Sleep(3 * time.Second)
	close(stop)
	loading.Wait()
	served, failed = c.counts()
	t.Logf("rollout: %s; served %v, failed %v", fn.Status.Rollout.Message, served, failed)
	if !strings.Contains(fn.Status.Rollout.Message, "error rate") || fn.Status.Traffic[0].Revision != "canary-2" {
		t.Errorf("rollout status %+v, traffic %+v", fn.Status.Rollout, fn.Status.Traffic)
	}
	total, bad := 0, failed["canary-3"]
	for _, n := range served {
		total += n
	}
	for rev, n := range failed {
		total += n
		if rev != "canary-3" {
			t.Errorf("%d failed calls answered by %s", n, rev)
		}
	}
	// canary-3 had 10 % of the calls while its step lasted: its share stays well under 20 %.
	if share := float64(served["canary-3"]+bad) / float64(total); share > 0.2 || bad == 0 {
		t.Errorf("canary-3 answered %.2f of %d calls (%d failed)", share, total, bad)
	}
	var events eventsv1.EventList
	if err := g.client.List(ctx, &events, client.InNamespace(tn.ns)); err != nil {
		t.Fatal(err)
	}
	warned := false
	for _, e := range events.Items {
		warned = warned || e.Reason == "RolloutRolledBack" && e.Regarding.Name == "canary" && strings.Contains(e.Note, "error rate")
	}
	if !warned {
		t.Error("no RolloutRolledBack Event on the function")
	}

	// History limit 1: the revisions without traffic beyond the newest idle one go, with
	// their objects (kube-controller-manager's garbage collector).
	noRollout := api.Rollout{}
	if _, err := tn.c.UpdateFunction(ctx, tn.ns, "canary", api.FunctionFields{Rollout: &noRollout, RevisionHistoryLimit: ptr.To(int32(1)),
		EnvVars: &map[string]string{"VERSION": "four"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "canary-1 and canary-2 collected with their Deployments", func() bool {
		for _, name := range []string{"canary-1", "canary-2"} {
			key := client.ObjectKey{Namespace: tn.ns, Name: name}
			if !apierrors.IsNotFound(g.client.Get(ctx, key, &v1alpha1.Revision{})) || !apierrors.IsNotFound(g.client.Get(ctx, key, &appsv1.Deployment{})) {
				return false
			}
		}
		return true
	})
	revs, err := tn.c.ListRevisions(ctx, tn.ns, "canary")
	if err != nil || len(revs) != 2 || revs[0].Name != "canary-3" || revs[1].Name != "canary-4" || revs[1].Percent != 100 {
		t.Errorf("revisions after GC: %+v, %v", revs, err)
	}
	if rev, _ := c.call(""); rev != "canary-4" {
		t.Errorf("after the last change %q answered", rev)
	}
}
