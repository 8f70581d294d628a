package devplane_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/client"
	"sless.dev/sless/history"
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
	d.update("ver", api.FunctionFields{MaxReplicas: ptr.To[int32](3)})
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
	d.update("ver", api.FunctionFields{RevisionHistoryLimit: ptr.To[int32](1), Traffic: &[]api.TrafficTarget{{Latest: true, Percent: 100}, {Revision: "ver-1", Tag: "old"}}})
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

// envHasher answers its VERSION and a digest of its BIG* variables, names and values.
var envHasher = map[string]string{"handler.py": `import hashlib, os


def handle(event, request=None):
    big = "".join(k + "=" + os.environ[k] + ";" for k in sorted(os.environ) if k.startswith("BIG"))
    return {"version": os.environ.get("VERSION", ""), "big": hashlib.sha256(big.encode()).hexdigest()}
`}

// bigDigest is envHasher's digest of env.
func bigDigest(env map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if strings.HasPrefix(k, "BIG") {
			b.WriteString(k + "=" + env[k] + ";")
		}
	}
	return fmt.Sprintf("%x", sha256.Sum256([]byte(b.String())))
}

// TestRevisionsStoreEnvOnce: 60 env changes of a function whose env is near the size cap
// (rules.MaxEnvTotalBytes), every revision kept (revision_history_limit 100, so the bound
// is the storage's, not GC's), leave its state file under 3 × MaxEnvTotalBytes — the spec's
// env and the oldest revision's in full, each later revision only what it changed (here one
// 31 KiB value once), plus the revisions' own records — where a copy of the env per revision
// made it 7.6 MB. Every revision still shows (GET .../revisions) and runs exactly the env it
// was made with: a rollback to an old one runs the old env, before and after a restart, and
// after a restart on a state file written in the earlier form (every revision's env in full).
func TestRevisionsStoreEnvOnce(t *testing.T) {
	t.Parallel()
	d, restart := startRestartable(t, "envonce", devOptions{})
	ctx := context.Background()
	value := func(c byte) string { return strings.Repeat(string(c), rules.MaxEnvValueBytes-1024) }
	env := map[string]string{"VERSION": "0", "BIG0": value('a'), "BIG1": value('b'), "BIG2": value('c'), "BIG3": value('d')}
	want := map[string]map[string]string{"ev-1": maps.Clone(env)}
	d.deploy("ev", "python3.12", envHasher, api.FunctionFields{EnvVars: &env, RevisionHistoryLimit: ptr.To[int32](100)})
	for i := 1; i <= 60; i++ {
		env["VERSION"] = fmt.Sprint(i)
		if i == 30 { // one large value changes and one goes
			env["BIG1"] = value('B')
			delete(env, "BIG3")
		}
		d.update("ev", api.FunctionFields{EnvVars: ptr.To(maps.Clone(env))})
		want[fmt.Sprintf("ev-%d", i+1)] = maps.Clone(env)
	}
	d.waitTraffic("ev", "ev-61", 100)

	stateFile := filepath.Join(d.dataDir, "state", "functions", d.ns, "ev.json")
	bound := int64(3 * rules.MaxEnvTotalBytes)
	checkSize := func(when string) {
		t.Helper()
		fi, err := os.Stat(stateFile)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > bound {
			t.Errorf("%s: the state file is %d bytes for 61 revisions, want at most %d", when, fi.Size(), bound)
		}
		t.Logf("%s: state file %d bytes", when, fi.Size())
	}
	checkRevisions := func(d *dev, when string) {
		t.Helper()
		revs, err := d.client.ListRevisions(ctx, d.ns, "ev")
		if err != nil || len(revs) != 61 {
			t.Fatalf("%s: %d revisions, %v", when, len(revs), err)
		}
		for _, r := range revs {
			if !maps.Equal(r.Config.EnvVars, want[r.Name]) {
				t.Errorf("%s: revision %s shows another env than it was made with (VERSION %q)", when, r.Name, r.Config.EnvVars["VERSION"])
			}
		}
	}
	runs := func(d *dev, rev string) {
		t.Helper()
		if _, err := d.client.Rollback(ctx, d.ns, "ev", rev); err != nil {
			t.Fatalf("rollback to %s: %v", rev, err)
		}
		var code int
		var served, body string
		testkit.WaitFor(t, "calls served by "+rev, 30*time.Second, func() bool {
			code, served, body = d.call("ev", nil)
			return code == 200 && served == rev
		})
		var got struct{ Version, Big string }
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatalf("call after the rollback to %s: %s", rev, body)
		}
		if got.Version != want[rev]["VERSION"] || got.Big != bigDigest(want[rev]) {
			t.Errorf("%s runs VERSION %s and BIG digest %s, want %s and %s", rev, got.Version, got.Big, want[rev]["VERSION"], bigDigest(want[rev]))
		}
	}
	checkSize("after 60 changes")
	checkRevisions(d, "after 60 changes")
	runs(d, "ev-11") // before the large change: BIG3 still there
	runs(d, "ev-41")

	d.stop()
	d = restart()
	d.waitSettled("ev")
	checkRevisions(d, "after a restart")
	runs(d, "ev-2")

	// A state file of the earlier form: every revision's config with its whole env.
	d.stop()
	data, err := os.ReadFile(stateFile)
	if err != nil {
		t.Fatal(err)
	}
	var file map[string]json.RawMessage
	var status map[string]any
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(file["status"], &status); err != nil {
		t.Fatal(err)
	}
	var old []api.Revision
	if err := json.Unmarshal(must(json.Marshal(status["revisions"])), &old); err != nil {
		t.Fatal(err)
	}
	for i := range old {
		old[i].Config.EnvVars = want[old[i].Name]
	}
	status["revisions"] = old
	file["status"] = must(json.Marshal(status))
	if err := os.WriteFile(stateFile, must(json.Marshal(file)), 0o600); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(must(os.ReadFile(stateFile))), "env_changes") {
		t.Fatal("the rewritten state file still has env_changes")
	}
	d = restart()
	d.waitSettled("ev")
	checkRevisions(d, "after a restart on the earlier form")
	runs(d, "ev-31")
	checkSize("written again after the earlier form")
}

// failing answers every call with a 500.
var failing = map[string]string{"handler.py": `def handle(event, request=None):
    return {"statusCode": 500, "body": "always"}
`}

// TestRolloutMovedOnlyByTheFunction is attack 8 of issue 51 on sless dev: an anonymous
// caller steered a health-gated rollout. Eight calls pinned to the new revision
// (X-Sless-Revision-Key) whose bodies the caller dropped rolled a good revision back (the
// gateway recorded them 499, and every call that did not succeed was an error); ten
// /healthz calls through /fn/, answered by the wrapper itself, promoted a revision that
// fails every call. Only the function's own outcomes count, and the wrappers' path is not
// served through /fn/: the good revision keeps its step, the failing one is held without a
// call of its own and then rolled back by its own failures.
func TestRolloutMovedOnlyByTheFunction(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{})
	ctx := context.Background()
	rolloutOf := func(name, rev string) *api.RolloutState {
		var st *api.RolloutState
		testkit.WaitFor(t, "the rollout of "+rev, 60*time.Second, func() bool {
			fn, err := d.client.GetFunction(ctx, d.ns, name)
			st = fn.Status.Rollout
			return err == nil && st != nil && st.Revision == rev
		})
		return st
	}

	// A good revision at 50 %; a caller pins itself to it and drops eight bodies.
	policy := api.Rollout{Steps: []int32{50, 100}, IntervalSec: 3600, MaxErrorRate: 0.05, MinRequests: 5}
	d.deploy("good", "python3.12", versioned, api.FunctionFields{EnvVars: &map[string]string{"VERSION": "1"}, Rollout: &policy})
	d.update("good", api.FunctionFields{EnvVars: &map[string]string{"VERSION": "2"}})
	rolloutOf("good", "good-2")
	key := ""
	for i := range 64 {
		if code, rev, _ := d.call("good", map[string]string{rules.HeaderRevisionKey: fmt.Sprint("k", i)}); code == http.StatusOK && rev == "good-2" {
			key = fmt.Sprint("k", i)
			break
		}
	}
	if key == "" {
		t.Fatal("no revision key of 64 pins a caller to good-2 at 50 %")
	}
	addr := strings.TrimPrefix(d.endpoint, "http://")
	for range 8 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST /fn/%s/good HTTP/1.1\r\nHost: %s\r\n%s: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{",
			d.ns, addr, rules.HeaderRevisionKey, key)
		time.Sleep(100 * time.Millisecond) // the call is at the function, waiting for its body
		conn.Close()
	}
	testkit.WaitFor(t, "the dropped calls recorded", 10*time.Second, func() bool {
		page, err := d.reader.List(ctx, history.Query{Namespace: d.ns, Function: "good", Limit: 100})
		n := 0
		for _, r := range page.Records {
			if r.Revision == "good-2" && r.HTTPStatus == history.HTTPClientClosed {
				n++
			}
		}
		return err == nil && n == 8
	})
	time.Sleep(3 * time.Second) // three judgements of the rollout
	if st := rolloutOf("good", "good-2"); st.Phase != api.RolloutProgressing || st.Percent != 50 || st.Errors != 0 {
		t.Fatalf("after eight dropped bodies the good revision's rollout is %+v; want it progressing at 50 %% with no error", st)
	}

	// A failing revision at 99 %; twelve health calls through /fn/, in four spellings, are
	// refused and counted for nothing.
	bad := api.Rollout{Steps: []int32{99, 100}, IntervalSec: 1, MaxErrorRate: 0.05, MinRequests: 10}
	d.deploy("bad", "python3.12", versioned, api.FunctionFields{Rollout: &bad})
	if _, err := d.client.UploadSource(ctx, d.ns, "bad", strings.NewReader(string(testkit.Zip(t, failing)))); err != nil {
		t.Fatal(err)
	}
	rolloutOf("bad", "bad-2")
	for _, path := range []string{rules.HealthPath, rules.HealthPath + "?hold_ms=10", "/%68ealthz", "//healthz"} {
		for range 3 {
			resp, err := http.Get(d.endpoint + "/fn/" + d.ns + "/bad" + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Fatalf("GET /fn/%s/bad%s: %d, want 404: the wrappers' own path is the platform's", d.ns, path, resp.StatusCode)
			}
		}
	}
	time.Sleep(3 * time.Second)
	if st := rolloutOf("bad", "bad-2"); st.Phase != api.RolloutProgressing || st.Step != 0 || st.Requests != 0 {
		t.Fatalf("after health calls through /fn/ the failing revision's rollout is %+v; want it held at its first step with no call", st)
	}
	for range 20 {
		d.call("bad", nil)
	}
	testkit.WaitFor(t, "the failing revision rolled back by its own failures", 30*time.Second, func() bool {
		fn, err := d.client.GetFunction(ctx, d.ns, "bad")
		return err == nil && fn.Status.Rollout != nil && fn.Status.Rollout.Phase == api.RolloutRolledBack
	})
}
