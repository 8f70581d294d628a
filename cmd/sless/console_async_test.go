package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"k8s.io/utils/ptr"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/test/browser"
	"sless.dev/sless/test/testkit"
)

// TestConsoleAsyncOnDevInChromium is the console's view of asynchronous invocations against
// a real `sless dev` (which queues them in its data directory, no broker), in a real
// browser: the async tab lists the calls queued, follows them while any is not final (a
// failing one queued again between its attempts) and then stops; one invocation shows its
// error (failed, dead-lettered) or its result (as text: markup is printed, not parsed); leaving
// the tab stops the polling; the overview shows the async settings and a cron trigger's
// pre-warm; the invoke panel queues a call and follows it to its result; a function with
// async off offers no queueing.
func TestConsoleAsyncOnDevInChromium(t *testing.T) {
	browser.Need(t)
	out, _ := runDevCmd(t, "--data-dir", devDataDir(t), "--listen", "127.0.0.1:0")
	text := waitOutput(t, out, "export SLESS_TOKEN=", time.Minute)
	d := sessionOf(t, text)
	m := consoleURLRE.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no console line in the banner:\n%s", text)
	}
	endpoint := d.endpoint
	timeout, dlq := int32(30), d.ns+".worker-failed"
	d.uploadPython(t, "worker", testkit.AsyncPython, api.FunctionFields{TimeoutSec: &timeout,
		Async: &api.AsyncFields{Enabled: ptr.To(true), MaxAttempts: ptr.To(int32(3)), BackoffMs: ptr.To(int32(4000)), DeadLetterQueue: &dlq}},
		"Ready", func(s api.FunctionStatus) bool { return s.Ready })
	d.deployPython(t, "plain", testkit.AsyncPython, 10)
	if _, err := d.c.CreateTrigger(context.Background(), d.ns, api.CreateTrigger{Name: "nightly", TriggerFields: api.TriggerFields{
		Type: ptr.To("cron"), Function: ptr.To("worker"), Schedule: ptr.To("0 3 * * *"), PrewarmSeconds: ptr.To(int32(60))}}); err != nil {
		t.Fatal(err)
	}

	// settings are the overview's definitions, a "name: value" line each.
	const settings = `[...document.querySelectorAll("#fn-meta dt")].map((dt) => dt.textContent + ": " + dt.nextElementSibling.textContent + "\n").join("")`
	row := func(id string) string { return `document.querySelector('#async-rows tr[data-async="` + id + `"]')` }

	p := browser.Open(t, 3*time.Minute)
	p.Do("sign in from the banner's URL", chromedp.Navigate(m[1]), chromedp.WaitVisible(chromedp.CSS(`tr[data-function="worker"]`)))
	p.Do("open the async tab", chromedp.Navigate(endpoint+"/console/#/fn/worker/async"), chromedp.WaitVisible(chromedp.ID("async-rows")))
	// Queued once the tab is open, so a loaded machine's slow browser start cannot miss the
	// failing call's wait between its attempts (4 s, then 8 s).
	ok := queueAsync(t, d, "worker", `{"name": "<b>hello async</b>"}`)
	bad := queueAsync(t, d, "worker", `{"fail": true, "name": "boom"}`)
	slow := queueAsync(t, d, "worker", `{"sleep": 3, "name": "slow"}`)
	p.Do("refresh the tab", chromedp.Click(chromedp.ID("async-refresh")))
	p.Wait("the three calls listed", row(ok)+` && `+row(bad)+` && `+row(slow))
	// The failing call waits 4 s, then 8 s, queued again with its error between attempts.
	p.Wait("the failing call queued for a retry", row(bad)+`.dataset.status === "queued" && `+row(bad)+`.querySelector("td.error").textContent !== ""`)
	if st := p.Eval(`document.getElementById("tab-async").dataset.state`); st != "following" {
		t.Fatalf("with a call not final the tab is %q, want following", st)
	}
	p.Screenshot("async-following")
	p.Wait("every call final, drawn by the tab's polling", `document.getElementById("tab-async").dataset.state === "all final"`)
	cells := func(id string) string {
		return p.Eval(`[...` + row(id) + `.children].map((td, i) => i === 3 || i === 4 ? (td.textContent === "—" ? "-" : "t") : td.textContent).join("|")`)
	}
	if got, want := cells(ok), ok+"|succeeded|1 / 3|t|t|200|"; got != want {
		t.Errorf("the succeeded call's row: %q, want %q", got, want)
	}
	if got, want := cells(slow), slow+"|succeeded|1 / 3|t|t|200|"; got != want {
		t.Errorf("the slow call's row: %q, want %q", got, want)
	}
	if got := cells(bad); !strings.HasPrefix(got, bad+"|failed|3 / 3|t|t|500|") || !strings.Contains(got, "500") {
		t.Errorf("the failed call's row: %q, want failed after 3 attempts with HTTP 500 and the error", got)
	}
	countFetches := `window.asyncFetches = 0;
		if (!window.fetchCounted) {
			window.fetchCounted = true;
			const f = window.fetch;
			window.fetch = (u, o) => { if (String(u).includes("/v1/namespaces/") && String(u).includes("/invocations")) window.asyncFetches++; return f(u, o); };
		}`
	p.Do("count the tab's reads", chromedp.Evaluate[chromedp.Void](countFetches))
	time.Sleep(2500 * time.Millisecond) // more than a polling period
	if n := p.Eval(`String(window.asyncFetches)`); n != "0" {
		t.Errorf("the tab read the invocations %s times after all were final; want it to stop polling", n)
	}
	p.Screenshot("async-all-final")

	p.Do("open the failed call", chromedp.Click(chromedp.CSS(`tr[data-async="`+bad+`"] a`)))
	p.Wait("its detail", `document.querySelector('#async-detail .invocation[data-status="failed"]')`)
	if e := p.Text("#async-detail .invocation-error"); !strings.Contains(e, "Failed after 3 attempts, dead-lettered") || !strings.Contains(e, "HTTP 500") || !strings.Contains(e, "asked to fail: boom") {
		t.Fatalf("the failed call's error: %q", e)
	}
	if !strings.Contains(p.Text("#async-detail dl"), "3 of 3") || !strings.Contains(p.Text("#async-detail h2"), bad) {
		t.Fatalf("the failed call's detail: %q %q", p.Text("#async-detail h2"), p.Text("#async-detail dl"))
	}
	if sel := p.Eval(`document.querySelector("#async-rows tr.selected").dataset.async`); sel != bad {
		t.Errorf("the selected row is %s, want %s", sel, bad)
	}
	p.Screenshot("async-failed")

	p.Do("open the succeeded call", chromedp.Click(chromedp.CSS(`tr[data-async="`+ok+`"] a`)))
	p.Wait("its detail", `document.querySelector('#async-detail .invocation[data-status="succeeded"]')`)
	if r := p.Text("#async-detail .invocation-result"); !strings.Contains(r, `"hello": "<b>hello async</b>"`) {
		t.Fatalf("the succeeded call's result: %q", r)
	}
	if n := p.Eval(`String(document.querySelectorAll("#async-detail b, #async-rows b").length)`); n != "0" {
		t.Fatalf("the result's markup became %s elements", n)
	}
	if dl := p.Text("#async-detail dl"); !strings.Contains(dl, "1 of 3") || !strings.Contains(dl, "application/json") || !strings.Contains(dl, "Finished") {
		t.Fatalf("the succeeded call's detail: %q", dl)
	}
	p.Screenshot("async-succeeded")

	// Leaving the tab while a call runs stops its polling.
	later := queueAsync(t, d, "worker", `{"sleep": 8, "name": "later"}`)
	p.Do("refresh the tab", chromedp.Click(chromedp.ID("async-refresh")))
	p.Wait("the new call followed", row(later)+` && document.getElementById("tab-async").dataset.state === "following"`)
	p.Do("leave the async tab", chromedp.Click(chromedp.CSS(`#fn-tabs a[data-tab="overview"]`)), chromedp.Evaluate[chromedp.Void](countFetches))
	p.Wait("the overview", `document.getElementById("fn-meta").textContent.includes("Dead-letter queue")`)
	time.Sleep(2500 * time.Millisecond)
	if n := p.Eval(`String(window.asyncFetches)`); n != "0" {
		t.Errorf("the invocations were read %s times after the async tab was left", n)
	}

	meta := p.Eval(settings)
	for _, want := range []string{"Async: on\n", "Attempts: 3 (2 retries after a failure)\n", "Backoff: 4 s before the 2nd attempt, doubling", "Dead-letter queue: " + dlq + "\n", "Protocol: http1\n"} {
		if !strings.Contains(meta, want) {
			t.Errorf("the overview's settings lack %q:\n%s", want, meta)
		}
	}
	p.Wait("the triggers", `document.querySelector('tr[data-trigger-row="nightly"]')`)
	if tr := p.Text(`tr[data-trigger-row="nightly"]`); !strings.Contains(tr, "0 3 * * * · warm 60 s before each tick") {
		t.Errorf("the cron trigger's row: %q, want its pre-warm", tr)
	}
	p.Wait("the overview drawn", `document.getElementById("build-log").dataset.state !== "loading" && document.querySelector("#chart-duration svg")`)
	p.Screenshot("overview-async-settings")

	p.Do("queue from the invoke panel", chromedp.Click(chromedp.CSS(`#fn-tabs a[data-tab="invoke"]`)), chromedp.WaitVisible(chromedp.ID("event")),
		chromedp.SetValue(chromedp.ID("event"), `{"sleep": 1, "name": "from the panel"}`), chromedp.Click(chromedp.ID("invoke-queue")),
		chromedp.Click(chromedp.ID("invoke-send")))
	p.Wait("the answer", `!document.getElementById("invoke-result").hidden`)
	if status, body := p.Text("#invoke-status"), p.Text("#invoke-body"); status != "202 Accepted" || !strings.Contains(body, `"status": "queued"`) {
		t.Fatalf("a queued call: status %q, body %q", status, body)
	}
	p.Wait("the call followed to its result", `document.querySelector('#invoke-invocation .invocation[data-status="succeeded"]')`)
	if r := p.Text("#invoke-invocation .invocation-result"); !strings.Contains(r, `"hello": "from the panel"`) {
		t.Fatalf("the queued call's result in the panel: %q", r)
	}
	p.Screenshot("invoke-async")
	panel := p.Eval(`document.querySelector("#invoke-invocation h3 code").textContent`)
	p.Do("open it in the async tab", chromedp.Click(chromedp.CSS(`#invoke-invocation h3 a`)))
	p.Wait("its detail", `document.getElementById("async-detail").dataset.status === "succeeded" && document.getElementById("async-detail").textContent.includes("Invocation `+panel+`")`)
	if !strings.Contains(p.Text("#async-detail .invocation-result"), "from the panel") {
		t.Fatalf("the async tab's detail of the panel's call: %q", p.Text("#async-detail"))
	}

	p.Do("a function with async off", chromedp.Navigate(endpoint+"/console/#/fn/plain/invoke"), chromedp.WaitVisible(chromedp.ID("event")))
	p.Wait("the panel", `document.getElementById("invoke-queue-note").textContent !== ""`)
	if disabled := p.Eval(`String(document.getElementById("invoke-queue").disabled)`); disabled != "true" {
		t.Errorf("the queue checkbox of a function with async off is enabled")
	}
	p.Do("its overview", chromedp.Click(chromedp.CSS(`#fn-tabs a[data-tab="overview"]`)))
	p.Wait("its settings", `document.getElementById("fn-meta").textContent.includes("/`+d.ns+`/plain")`)
	if meta := p.Eval(settings); !strings.Contains(meta, "Async: off") || strings.Contains(meta, "Dead-letter") {
		t.Errorf("a function with async off: %q", meta)
	}
}

// queueAsync POSTs event to the function with Prefer: respond-async and returns the
// invocation's ID from the 202 answer.
func queueAsync(t *testing.T, d devSession, fn, event string) string {
	t.Helper()
	url := d.endpoint + "/fn/" + d.ns + "/" + fn
	resp, b := testkit.PostJSON(t, url, event, http.Header{"Prefer": {"respond-async"}})
	var inv api.AsyncInvocation
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal(b, &inv) != nil || inv.ID == "" {
		t.Fatalf("POST %s with Prefer: respond-async: %d %s", url, resp.StatusCode, b)
	}
	return inv.ID
}
