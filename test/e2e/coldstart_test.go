//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/gateway/api"
	slessclient "sless.dev/sless/gateway/client"
	"sless.dev/sless/test/testkit"
)

// coldStart is one request to a function at zero, split at the moments the ground records.
type coldStart struct {
	total, keda, schedule, pull, start, readiness, proxy time.Duration
	fetched                                              bool // the image came from the registry
}

// TestColdStartFigures measures cold starts through the gateway, the real interceptor and
// KEDA (coldStarts of them): request → KEDA raises replicas (KEDA
// reaction) → the kubelet has the pod (ReplicaSet controller, binding) → the image is present
// (pulled and unpacked on the first start, the node's cache after) → the container's process
// runs → the readiness probe passes → the response arrives (EndpointSlice update, the
// interceptor's wait ends, proxying). The first run pulls the image, the others find it
// cached; each gets its own table. A figure test (make bench): the journeys assert the cold
// start itself (TestScaleFromZeroAndBack). With SLESS_E2E_FIGURES=file the tables are written
// there.
func TestColdStartFigures(t *testing.T) {
	figureTest(t)
	t.Parallel()
	n := coldStarts()
	tn := newTenant(t)
	// A source of its own: the first cold start must pull an image the node has never seen.
	deployFunction(t, tn, "cold", helloFields(2), map[string]string{"handler.py": helloPython + "# cold starts of " + tn.ns + "\n"})
	rw := watchReplicas(t, tn.ns, "cold")
	var runs []coldStart
	for i := 0; i < n; i++ {
		waitScaledToZero(t, tn.ns, "cold", 2*time.Minute)
		t0 := time.Now()
		resp, body := invoke(t, tn, "cold", `{"name": "cold"}`)
		end := time.Now()
		if !checkHello(t, resp, body, "cold") {
			t.Fatalf("run %d: no cold start reported", i)
		}
		up, ok := rw.scaledUpAfter(t0)
		key, marks := podAfter(t, tn.ns, "cold", t0)
		if !ok || key == "" || marks["pulling"].IsZero() || marks["pulled"].IsZero() || marks["started"].IsZero() || marks["ready"].IsZero() {
			t.Fatalf("run %d: incomplete timeline (scaled up %v, pod %q, marks %v)", i, ok, key, marks)
		}
		_, fetched := marks["fetched"]
		if fetched != (i == 0) {
			t.Errorf("run %d: image fetched from the registry = %v; only the first start on the node pulls", i, fetched)
		}
		runs = append(runs, coldStart{total: end.Sub(t0), keda: up.Sub(t0), schedule: marks["pulling"].Sub(up),
			pull: marks["pulled"].Sub(marks["pulling"]), start: marks["started"].Sub(marks["pulled"]),
			readiness: marks["ready"].Sub(marks["started"]), proxy: end.Sub(marks["ready"]), fetched: fetched})
	}
	table := "first start on the node (image pulled and unpacked):\n" + coldStartTable(runs[:1])
	if len(runs) > 1 {
		table += "\nimage cached on the node:\n" + coldStartTable(runs[1:])
	}
	t.Log("\n" + table)
	if f := os.Getenv("SLESS_E2E_FIGURES"); f != "" {
		if err := os.WriteFile(f, []byte(table), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// coldStarts is how many cold starts the figure tests take: SLESS_E2E_COLD_STARTS, default 3
// (the first pulls the image, the others find it cached: enough to hold both); the figures
// in docs/benchmarks.md are taken with 10.
func coldStarts() int {
	if v, err := strconv.Atoi(os.Getenv("SLESS_E2E_COLD_STARTS")); err == nil && v > 0 {
		return v
	}
	return 3
}

func coldStartTable(runs []coldStart) string {
	cols := []struct {
		name string
		get  func(coldStart) time.Duration
	}{
		{"KEDA reaction (request → replicas 1)", func(c coldStart) time.Duration { return c.keda }},
		{"pod to the kubelet (replicas 1 → pod bound)", func(c coldStart) time.Duration { return c.schedule }},
		{"image pull and unpack", func(c coldStart) time.Duration { return c.pull }},
		{"container start (namespaces, overlay, exec)", func(c coldStart) time.Duration { return c.start }},
		{"readiness (process → probe passed)", func(c coldStart) time.Duration { return c.readiness }},
		{"proxy (ready → response)", func(c coldStart) time.Duration { return c.proxy }},
		{"total, request → response", func(c coldStart) time.Duration { return c.total }},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| step (%d cold starts) | p50 | p95 | max |\n|---|---|---|---|\n", len(runs))
	for _, c := range cols {
		ds := make([]time.Duration, len(runs))
		for i, r := range runs {
			ds[i] = c.get(r)
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", c.name, fmtDur(percentile(ds, 50)), fmtDur(percentile(ds, 95)), fmtDur(ds[len(ds)-1]))
	}
	return b.String()
}

// percentile of sorted ds, nearest rank.
func percentile(ds []time.Duration, p int) time.Duration {
	i := (p*len(ds)+99)/100 - 1
	return ds[max(0, min(i, len(ds)-1))]
}

// pidPython answers with its process id: a new pid is a new process, i.e. a cold start.
const pidPython = `import os

def handle(event, request=None):
    return {"pid": os.getpid()}
`

// TestColdStartSlessDev measures `sless dev`'s cold start in the same run, for comparison:
// the same Python function at zero processes, one request through its /fn/ route after each
// idle scale-down (a new pid proves the process was started for the request).
func TestColdStartSlessDev(t *testing.T) {
	t.Parallel()
	n := coldStarts()
	endpoint, token := startSlessDev(t)
	c, err := slessclient.New(endpoint, token, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id, err := c.WhoAmI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.EnsureNamespace(ctx, id.Namespace); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateFunction(ctx, id.Namespace, api.CreateFunction{Name: "cold", FunctionFields: helloFields(1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UploadSource(ctx, id.Namespace, "cold", bytes.NewReader(testkit.Zip(t, map[string]string{"handler.py": pidPython}))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "sless dev function Ready", func() bool {
		fn, err := c.GetFunction(ctx, id.Namespace, "cold")
		return err == nil && fn.Status.Ready
	})
	call := func() int {
		resp, err := http.Post(endpoint+"/fn/"+id.Namespace+"/cold", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct{ PID int }
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || out.PID == 0 {
			t.Fatalf("sless dev invoke: %d %v", resp.StatusCode, err)
		}
		return out.PID
	}
	last := call()
	var totals []time.Duration
	for i := 0; i < n; i++ {
		// Scale-down period 1 s plus the pool's 200 ms tick, longer on a loaded machine.
		waitFor(t, 30*time.Second, "sless dev to stop the idle function process", func() bool { return !testkit.Alive(last) })
		t0 := time.Now()
		pid := call()
		totals = append(totals, time.Since(t0))
		if pid == last {
			t.Fatalf("run %d: the same process (pid %d) answered; sless dev did not scale to zero", i, pid)
		}
		last = pid
	}
	sort.Slice(totals, func(i, j int) bool { return totals[i] < totals[j] })
	t.Logf("sless dev cold start, request → response over %d runs: p50 %s, p95 %s, max %s", n,
		fmtDur(percentile(totals, 50)), fmtDur(percentile(totals, 95)), fmtDur(totals[len(totals)-1]))
}

// startSlessDev runs `sless dev` (the binary under test) with a private data directory and
// returns the endpoint and token it prints.
func startSlessDev(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(g.tools["sless"], "dev", "--data-dir", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0")
	logf, err := os.Create(filepath.Join(dir, "sless-dev.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
	})
	type banner struct{ endpoint, token string }
	found := make(chan banner, 1)
	go func() {
		var b banner
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "export SLESS_ENDPOINT="); ok {
				b.endpoint = v
			}
			if v, ok := strings.CutPrefix(sc.Text(), "export SLESS_TOKEN="); ok {
				b.token = v
			}
			if b.endpoint != "" && b.token != "" {
				found <- b
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case b := <-found:
		return b.endpoint, b.token
	case <-time.After(60 * time.Second):
		t.Fatalf("sless dev printed no endpoint and token within 60 s; see %s", logf.Name())
	}
	return "", ""
}
