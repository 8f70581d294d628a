package devplane_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/client"
	"sless.dev/sless/rules"
	"sless.dev/sless/test/testkit"
)

// versioned answers the VERSION its revision runs with.
var versioned = map[string]string{"handler.py": `import os


def handle(event, request=None):
    return {"version": os.environ.get("VERSION", "")}
`}

// call invokes /fn/ with extra headers and answers the status, the revision that served and
// the body.
func (d *dev) call(name string, header map[string]string) (int, string, string) {
	d.t.Helper()
	req, err := http.NewRequest(http.MethodPost, d.endpoint+"/fn/"+d.ns+"/"+name, strings.NewReader(`{}`))
	if err != nil {
		d.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get(rules.HeaderRevision), string(body)
}

func (d *dev) update(name string, f api.FunctionFields) api.Function {
	d.t.Helper()
	if _, err := d.client.UpdateFunction(context.Background(), d.ns, name, f); err != nil {
		d.t.Fatalf("update %s: %v", name, err)
	}
	return d.waitSettled(name)
}

// waitTraffic waits until the function's resolved traffic gives rev percent.
func (d *dev) waitTraffic(name, rev string, percent int32) []api.Revision {
	d.t.Helper()
	var revs []api.Revision
	testkit.WaitFor(d.t, fmt.Sprintf("%s to have %d %%", rev, percent), 30*time.Second, func() bool {
		var err error
		if revs, err = d.client.ListRevisions(context.Background(), d.ns, name); err != nil {
			d.t.Fatal(err)
		}
		for _, r := range revs {
			if r.Name == rev {
				return r.Percent == percent
			}
		}
		return false
	})
	return revs
}

// TestRevisionsTrafficAndRollback: each change to what runs makes a revision (a scaling
// change does not); a 50/50 split lands within the binomial 99.9 % bound with each revision
// started on its own; a tag reaches only its revision; a revision by name only for the
// tenant; a sticky key stays; a rollback under load moves every call with no error; bad
// traffic is a 400 naming the field; a failed build never gets traffic; the history names
// the revision; old idle revisions are deleted.
func TestRevisionsTrafficAndRollback(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{})
	ctx := context.Background()
	fn := d.deploy("ver", "python3.12", versioned, api.FunctionFields{EnvVars: &map[string]string{"VERSION": "1"}})
	if !fn.Status.Ready || fn.Status.LatestCreatedRevision != "ver-1" || fn.Status.LatestReadyRevision != "ver-1" {
		t.Fatalf("first deploy: %+v", fn.Status)
	}
	if code, rev, body := d.call("ver", nil); code != 200 || rev != "ver-1" || !strings.Contains(body, `"1"`) {
		t.Fatalf("call: %d %s %s", code, rev, body)
	}
	fn = d.update("ver", api.FunctionFields{EnvVars: &map[string]string{"VERSION": "2"}})
	d.waitTraffic("ver", "ver-2", 100)
	if code, rev, body := d.call("ver", nil); code != 200 || rev != "ver-2" || !strings.Contains(body, `"2"`) {
		t.Fatalf("after the change: %d %s %s", code, rev, body)
	}
	d.update("ver", api.FunctionFields{MaxReplicas: ptr[int32](3)})
	revs, err := d.client.ListRevisions(ctx, d.ns, "ver")
	if err != nil || len(revs) != 2 || revs[0].Config.EnvVars["VERSION"] != "1" || revs[1].Status.Phase != api.RevisionReady {
		t.Fatalf("a scaling change made a revision, or revisions wrong: %+v %v", revs, err)
	}

	// 50/50: 1,000 calls within the binomial 99.9 % bound; each revision starts on its own.
	d.update("ver", api.FunctionFields{Traffic: &[]api.TrafficTarget{{Revision: "ver-1", Percent: 50}, {Latest: true, Percent: 50}}})
	d.waitTraffic("ver", "ver-1", 50)
	counts := map[string]int{}
	for range 1000 {
		code, rev, _ := d.call("ver", nil)
		if code != 200 {
			t.Fatalf("split call: %d", code)
		}
		counts[rev]++
	}
	if bound := 3.29 * math.Sqrt(1000*0.25); math.Abs(float64(counts["ver-1"])-500) > bound || counts["ver-1"]+counts["ver-2"] != 1000 {
		t.Fatalf("split %v, want 500 ± %.0f each", counts, bound)
	}
	for _, rev := range []string{"ver-1", "ver-2"} {
		if s := d.backend.Pool().Stats(rules.RevisionHost(d.ns, rev, rules.DefaultDomain)); s.Processes == 0 {
			t.Fatalf("revision %s has no process of its own: %+v", rev, s)
		}
	}

	// A sticky key always lands on one revision.
	_, first, _ := d.call("ver", map[string]string{rules.HeaderRevisionKey: "user-42"})
	for range 20 {
		if _, rev, _ := d.call("ver", map[string]string{rules.HeaderRevisionKey: "user-42"}); rev != first {
			t.Fatalf("key user-42 moved from %s to %s", first, rev)
		}
	}

	// A tag with no share reaches only its revision; a revision by name needs the tenant.
	d.update("ver", api.FunctionFields{Traffic: &[]api.TrafficTarget{{Revision: "ver-1", Percent: 100}, {Latest: true, Tag: "canary"}}})
	d.waitTraffic("ver", "ver-2", 0)
	for range 20 {
		if _, rev, _ := d.call("ver", nil); rev != "ver-1" {
			t.Fatalf("untagged call went to %s", rev)
		}
		if _, rev, _ := d.call("ver", map[string]string{rules.HeaderTag: "canary"}); rev != "ver-2" {
			t.Fatalf("tagged call went to %s", rev)
		}
	}
	if code, _, body := d.call("ver", map[string]string{rules.HeaderTag: "nope"}); code != 404 || !strings.Contains(body, "no tag") {
		t.Fatalf("unknown tag: %d %s", code, body)
	}
	if code, _, _ := d.call("ver", map[string]string{rules.HeaderRevision: "ver-2"}); code != 401 {
		t.Fatalf("revision by name without a token: %d, want 401", code)
	}
	other := d.as("other")
	if code, _, _ := d.call("ver", map[string]string{rules.HeaderRevision: "ver-2", "Authorization": "Bearer " + other.token}); code != 403 {
		t.Fatalf("revision by name with another tenant's token: %d, want 403", code)
	}
	if code, rev, _ := d.call("ver", map[string]string{rules.HeaderRevision: "ver-2", "Authorization": "Bearer " + d.token}); code != 200 || rev != "ver-2" {
		t.Fatalf("revision by name: %d %s", code, rev)
	}
	if revs := d.waitTraffic("ver", "ver-2", 0); len(revs[1].Tags) != 1 || revs[1].Tags[0] != "canary" {
		t.Fatalf("ver-2's tags: %+v", revs[1])
	}

	// Bad traffic: 400 naming the field, nothing changed.
	for _, tc := range []struct {
		traffic []api.TrafficTarget
		field   string
	}{
		{[]api.TrafficTarget{{Revision: "ver-9", Percent: 100}}, "traffic[0].revision"},
		{[]api.TrafficTarget{{Revision: "ver-1", Percent: 60}, {Latest: true, Percent: 30}}, "traffic"},
	} {
		_, err := d.client.UpdateFunction(ctx, d.ns, "ver", api.FunctionFields{Traffic: &tc.traffic})
		var ae *client.Error
		if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Field != tc.field {
			t.Fatalf("traffic %+v: %v, want 400 on %s", tc.traffic, err, tc.field)
		}
	}

	// A build that fails makes a failed revision that gets no traffic and cannot be named.
	d.update("ver", api.FunctionFields{Traffic: &[]api.TrafficTarget{{Latest: true, Percent: 100}}})
	d.waitTraffic("ver", "ver-2", 100)
	if _, err := d.client.UploadSource(ctx, d.ns, "ver", strings.NewReader(string(testkit.Zip(t, map[string]string{"handler.py": "def handle(:\n"})))); err != nil {
		t.Fatal(err)
	}
	fn = d.waitSettled("ver")
	revs, _ = d.client.ListRevisions(ctx, d.ns, "ver")
	if fn.Status.Phase != api.PhaseFailed || fn.Status.LatestCreatedRevision != "ver-3" || fn.Status.LatestReadyRevision != "ver-2" ||
		revs[2].Status.Phase != api.RevisionFailed || revs[2].Status.Message == "" {
		t.Fatalf("failed build: %+v %+v", fn.Status, revs)
	}
	if _, rev, _ := d.call("ver", nil); rev != "ver-2" {
		t.Fatalf("after a failed build the call went to %s", rev)
	}
	_, err = d.client.UpdateFunction(ctx, d.ns, "ver", api.FunctionFields{Traffic: &[]api.TrafficTarget{{Revision: "ver-3", Percent: 100}}})
	var ae *client.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 || !strings.Contains(ae.Message, "failed") {
		t.Fatalf("traffic to the failed revision: %v", err)
	}

	// Rollback under load: every call answered 2xx, and all traffic on ver-1 at once.
	var stop atomic.Bool
	var calls, bad atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				code, _, _ := d.call("ver", nil)
				calls.Add(1)
				if code/100 != 2 {
					bad.Add(1)
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := d.client.Rollback(ctx, d.ns, "ver", ""); err != nil {
		t.Fatal(err)
	}
	moved := time.Now()
	// The move is a route change plus, here, a cold start of ver-1 (it left the pool when it
	// stopped serving); the time is logged, the bound is for a loaded machine.
	testkit.WaitFor(t, "every call on ver-1", 15*time.Second, func() bool {
		_, rev, _ := d.call("ver", nil)
		return rev == "ver-1"
	})
	took := time.Since(moved)
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d of %d calls failed during the rollback", bad.Load(), calls.Load())
	}
	t.Logf("rollback moved all traffic within %v; %d calls, none failed", took, calls.Load())
	for range 20 {
		if _, rev, _ := d.call("ver", nil); rev != "ver-1" {
			t.Fatalf("after the rollback a call went to %s", rev)
		}
	}

	// The history names the revision.
	var recs []api.Invocation
	testkit.WaitFor(t, "records naming ver-1", 10*time.Second, func() bool {
		recs = d.invocations("ver")
		return len(recs) > 0 && recs[0].Revision == "ver-1"
	})

	// Revisions without traffic beyond the limit are deleted; a tagged one never is.
	d.update("ver", api.FunctionFields{RevisionHistoryLimit: ptr[int32](1), Traffic: &[]api.TrafficTarget{{Latest: true, Percent: 100}, {Revision: "ver-1", Tag: "old"}}})
	for _, v := range []string{"4", "5"} {
		if _, err := d.client.UploadSource(ctx, d.ns, "ver", strings.NewReader(string(testkit.Zip(t, versioned)))); err != nil {
			t.Fatal(err)
		}
		d.waitSettled("ver")
		d.update("ver", api.FunctionFields{EnvVars: &map[string]string{"VERSION": v}})
	}
	testkit.WaitFor(t, "revision GC", 10*time.Second, func() bool {
		revs, _ = d.client.ListRevisions(ctx, d.ns, "ver")
		var names []string
		for _, r := range revs {
			names = append(names, r.Name)
		}
		// ver-1 tagged, one idle kept (the newest), the latest serving.
		return strings.Join(names, " ") == "ver-1 ver-5 ver-6"
	})
}

// flaky fails every other call with a 500.
var flaky = map[string]string{"handler.py": `import os

calls = 0


def handle(event, request=None):
    global calls
    calls += 1
    if calls % 2:
        return {"statusCode": 500, "body": "boom"}
    return {"version": os.environ.get("VERSION", "")}
`}

// TestHealthGatedRollout: with a rollout policy a new ready revision takes latest's traffic
// in steps judged by its own calls in the invocation history: a healthy one reaches 100 %;
// one failing half its calls is rolled back after its first step, the status says why with
// the measured rate, and its failed calls stay within that step's share.
func TestHealthGatedRollout(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{})
	ctx := context.Background()
	policy := api.Rollout{Steps: []int32{10, 50, 100}, IntervalSec: 1, MaxErrorRate: 0.05, MinRequests: 20}
	d.deploy("ro", "python3.12", versioned, api.FunctionFields{EnvVars: &map[string]string{"VERSION": "1"}, Rollout: &policy})

	// load calls the function until stop, counting answers by revision and failures.
	load := func(stop *atomic.Bool) (func() (map[string]int, int), func()) {
		var mu sync.Mutex
		byRev, failed := map[string]int{}, 0
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				for !stop.Load() {
					code, rev, _ := d.call("ro", nil)
					mu.Lock()
					byRev[rev]++
					if code != 200 {
						failed++
					}
					mu.Unlock()
				}
			})
		}
		return func() (map[string]int, int) { mu.Lock(); defer mu.Unlock(); return maps.Clone(byRev), failed }, wg.Wait
	}

	// A healthy revision goes 10 → 50 → 100 %.
	var stop atomic.Bool
	counts, wait := load(&stop)
	d.update("ro", api.FunctionFields{EnvVars: &map[string]string{"VERSION": "2"}})
	seen := map[int32]bool{}
	testkit.WaitFor(t, "the healthy rollout to complete", 60*time.Second, func() bool {
		fn, err := d.client.GetFunction(ctx, d.ns, "ro")
		if err != nil || fn.Status.Rollout == nil {
			return false
		}
		seen[fn.Status.Rollout.Percent] = true
		return fn.Status.Rollout.Phase == api.RolloutComplete && fn.Status.Rollout.Revision == "ro-2"
	})
	stop.Store(true)
	wait()
	if byRev, failed := counts(); failed != 0 || byRev["ro-1"] == 0 || byRev["ro-2"] == 0 {
		t.Fatalf("healthy rollout: answers %v, %d failed", byRev, failed)
	}
	if !seen[10] && !seen[50] {
		t.Fatalf("the rollout showed no intermediate step: %v", seen)
	}
	d.waitTraffic("ro", "ro-2", 100)

	// A revision failing half its calls is rolled back at its first step.
	if _, err := d.client.UploadSource(ctx, d.ns, "ro", strings.NewReader(string(testkit.Zip(t, flaky)))); err != nil {
		t.Fatal(err)
	}
	stop.Store(false)
	counts, wait = load(&stop)
	var fn api.Function
	testkit.WaitFor(t, "the flaky revision to be rolled back", 60*time.Second, func() bool {
		var err error
		fn, err = d.client.GetFunction(ctx, d.ns, "ro")
		return err == nil && fn.Status.Rollout != nil && fn.Status.Rollout.Revision == "ro-3" && fn.Status.Rollout.Phase == api.RolloutRolledBack
	})
	time.Sleep(500 * time.Millisecond)
	stop.Store(true)
	wait()
	byRev, failed := counts()
	ro := fn.Status.Rollout
	if ro.Percent != 10 || !strings.Contains(ro.Message, "error rate") || !strings.Contains(ro.Message, "above 0.05 at 10 %") {
		t.Fatalf("rolled back status: %+v", ro)
	}
	total := byRev["ro-2"] + byRev["ro-3"]
	if failed > byRev["ro-3"] || float64(byRev["ro-3"]) > 0.25*float64(total)+10 {
		t.Fatalf("ro-3 took %d of %d calls (%d failed); a 10 %% step should bound it", byRev["ro-3"], total, failed)
	}
	t.Logf("rolled back: %s; ro-3 served %d of %d calls, %d failed", ro.Message, byRev["ro-3"], total, failed)
	for range 20 {
		if code, rev, _ := d.call("ro", nil); code != 200 || rev != "ro-2" {
			t.Fatalf("after the rollback: %d from %s", code, rev)
		}
	}
}
