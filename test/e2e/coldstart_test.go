//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// coldStart is one request to a function at zero, split at the moments the ground records.
type coldStart struct {
	total, keda, podStart, readiness, proxy time.Duration
}

// TestColdStartFigures measures cold starts through the gateway, the real interceptor and
// KEDA (SLESS_E2E_COLD_STARTS of them, default 10): request → KEDA raises replicas (KEDA
// reaction) → the pod's process runs (ReplicaSet controller, binding, process start) → the
// readiness probe passes (readiness) → the response arrives (EndpointSlice update, the
// interceptor's wait ends, proxying). With SLESS_E2E_FIGURES=file the table is written there.
func TestColdStartFigures(t *testing.T) {
	n := 10
	if v, err := strconv.Atoi(os.Getenv("SLESS_E2E_COLD_STARTS")); err == nil && v > 0 {
		n = v
	}
	tn := newTenant(t)
	deployFunction(t, tn, "cold", helloFields(2), map[string]string{"handler.py": helloPython})
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
		if !ok || key == "" || marks["started"].IsZero() || marks["ready"].IsZero() {
			t.Fatalf("run %d: incomplete timeline (scaled up %v, pod %q, marks %v)", i, ok, key, marks)
		}
		runs = append(runs, coldStart{total: end.Sub(t0), keda: up.Sub(t0), podStart: marks["started"].Sub(up),
			readiness: marks["ready"].Sub(marks["started"]), proxy: end.Sub(marks["ready"])})
	}
	table := coldStartTable(runs)
	t.Log("\n" + table)
	if f := os.Getenv("SLESS_E2E_FIGURES"); f != "" {
		if err := os.WriteFile(f, []byte(table), 0o644); err != nil {
			t.Error(err)
		}
	}
}

func coldStartTable(runs []coldStart) string {
	cols := []struct {
		name string
		get  func(coldStart) time.Duration
	}{
		{"KEDA reaction (request → replicas 1)", func(c coldStart) time.Duration { return c.keda }},
		{"pod start (replicas 1 → process running)", func(c coldStart) time.Duration { return c.podStart }},
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
