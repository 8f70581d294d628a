package devplane_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/test/testkit"
)

// TestColdStartsAreVisible: the caller sees whether its invocation waited for a process
// (X-Sless-Cold-Start), the history records it, and /metrics counts cold starts per function.
func TestColdStartsAreVisible(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{})
	d.deploy("cold", "python3.11", map[string]string{"handler.py": testkit.SteerablePython}, api.FunctionFields{})
	call := func() string {
		t.Helper()
		resp, err := http.Post(d.endpoint+"/fn/"+d.ns+"/cold", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-KEDA-HTTP-Cold-Start") != "" {
			t.Fatalf("status %d, backend header %q passed on", resp.StatusCode, resp.Header.Get("X-KEDA-HTTP-Cold-Start"))
		}
		return resp.Header.Get("X-Sless-Cold-Start")
	}
	if got := []string{call(), call()}; got[0] != "true" || got[1] != "false" {
		t.Fatalf("X-Sless-Cold-Start of a call from zero and of the next one: %v, want [true false]", got)
	}
	var recs []api.Invocation
	testkit.WaitFor(t, "two records", 5*time.Second, func() bool { recs = d.invocations("cold"); return len(recs) == 2 })
	if !recs[1].ColdStart || recs[0].ColdStart { // newest first
		t.Fatalf("history cold_start (newest first): %v, %v; want false, true", recs[0].ColdStart, recs[1].ColdStart)
	}
	metrics := d.metrics()
	for _, want := range []string{
		`sless_cold_starts_total{function="cold",namespace="` + d.ns + `",revision="cold-1"} 1`,
		`sless_cold_start_duration_seconds_count{function="cold",namespace="` + d.ns + `",revision="cold-1"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestStatusIsCurrent: the answer to an upload does not repeat the status of the spec
// before it ("waiting for source"); a Go entrypoint in the module.function form builds.
func TestStatusIsCurrent(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{})
	ctx := context.Background()
	rt, ep := "go1.25", "handler.Greet"
	if _, err := d.client.CreateFunction(ctx, d.ns, api.CreateFunction{Name: "greet", FunctionFields: api.FunctionFields{Runtime: &rt, Entrypoint: &ep}}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the pending status", 5*time.Second, func() bool {
		fn, _ := d.client.GetFunction(ctx, d.ns, "greet")
		return strings.Contains(fn.Status.Message, "waiting for source")
	})
	src := "package handler\n\nfunc Greet(event map[string]interface{}) interface{} { return \"hi\" }\n"
	fn, err := d.client.UploadSource(ctx, d.ns, "greet", bytes.NewReader(testkit.Zip(t, map[string]string{"handler.go": src})))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(fn.Status.Message, "waiting for source") || fn.Status.Ready {
		t.Fatalf("status right after the upload: %+v", fn.Status)
	}
	if fn = d.waitSettled("greet"); !fn.Status.Ready {
		t.Fatalf("entrypoint handler.Greet: %+v", fn.Status)
	}
	if code, body := d.invoke("greet", `{}`); code != 200 || body != "hi" {
		t.Fatalf("invoke: %d %s", code, body)
	}
}
