package cluster_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/history"
	"sless.dev/sless/test/browser"
	"sless.dev/sless/test/pgtest"
	"sless.dev/sless/test/testkit"
)

// newBrowser starts headless Chromium with a fresh profile for the test; it stops with it.
func newBrowser(t *testing.T) context.Context { return browser.New(t, 90*time.Second) }

// signIn pastes tn's token into the console's sign-in form and waits for the function list.
func signIn(p *browser.Page, base string, tn tenant, fn string) {
	p.Do("sign in",
		chromedp.Navigate(base+"/console"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), tn.token),
		chromedp.Click(chromedp.ID("signin-button")),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-function="`+fn+`"]`)),
	)
}

// TestConsoleInChromium signs in with a token, sees the tenant's functions with badges and
// build errors, opens the highlighted source, reads the invocation history with its cold
// starts, toggles a trigger and watches a build fail, in a real headless browser.
func TestConsoleInChromium(t *testing.T) {
	up := newUpstream(t)
	h := newHarness(t, harnessOptions{interceptor: up.URL})
	tn := h.tenant()
	ctx := context.Background()
	fnURL := h.deploy(tn, "greeter", 10)
	if _, err := tn.c.UploadSource(ctx, tn.ns, "greeter", bytes.NewReader(testkit.Zip(t, map[string]string{
		"handler.go": goHandler, "README.md": "# greeter\n"}))); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.c.CreateTrigger(ctx, tn.ns, api.CreateTrigger{Name: "web", TriggerFields: api.TriggerFields{Type: ptr.To("http"), Function: ptr.To("greeter")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.c.CreateTrigger(ctx, tn.ns, api.CreateTrigger{Name: "hourly", TriggerFields: api.TriggerFields{Type: ptr.To("cron"), Function: ptr.To("greeter"), Schedule: ptr.To("@hourly")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.c.CreateFunction(ctx, tn.ns, api.CreateFunction{Name: "broken", FunctionFields: api.FunctionFields{Runtime: ptr.To("python3.12")}}); err != nil {
		t.Fatal(err)
	}
	failBuild(t, tn.ns, "broken", "pip install: No matching distribution found for nonexistent-pkg")
	do(t, "GET", fnURL+"/cold", "", "", nil)
	for range 2 {
		do(t, "GET", fnURL+"/echo", "", "", nil)
	}
	testkit.WaitFor(t, "3 invocation rows", 10*time.Second, func() bool { return pgtest.CountInvocations(t, h.dbURL, "WHERE namespace = $1", tn.ns) == 3 })
	// Another tenant's function must not show up.
	other := h.tenant()
	other.newFunction(t, "secret")

	p := browser.Open(t, 2*time.Minute)
	signIn(p, h.URL, tn, "greeter")
	p.Do("see the broken function", chromedp.WaitVisible(chromedp.CSS(`tr[data-function="broken"]`)))
	rows, broken, kinds, who := p.Text("#function-rows"), p.Text(`tr[data-function="broken"]`), p.Text(`tr[data-function="greeter"] td:nth-child(3)`), p.Text("#who")
	if !strings.Contains(who, tn.ns) || strings.Contains(rows, "secret") || !strings.Contains(rows, "/fn/"+tn.ns+"/greeter") {
		t.Fatalf("list: who %q rows %q", who, rows)
	}
	if !strings.Contains(broken, "Failed") || !strings.Contains(broken, "build failed") || !strings.Contains(kinds, "cron") || !strings.Contains(kinds, "http") {
		t.Fatalf("badges: broken %q, greeter kinds %q", broken, kinds)
	}
	p.Screenshot("functions")

	p.Do("open the function",
		chromedp.Click(chromedp.CSS(`tr[data-function="greeter"] a`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-trigger-row="hourly"]`)),
	)
	overviewDrawn(p)
	p.Do("disable the cron trigger",
		chromedp.Click(chromedp.CSS(`button[data-trigger="hourly"]`)),
		chromedp.WaitVisible(chromedp.Search(`//tr[@data-trigger-row="hourly"]/td[text()="disabled"]`)),
	)
	trg, err := tn.c.GetTrigger(ctx, tn.ns, "hourly")
	if err != nil || trg.Enabled || !strings.Contains(p.Text(`tr[data-trigger-row="hourly"]`), "Enable") {
		t.Fatalf("after clicking Disable: trigger %+v (%v)", trg.TriggerSpec, err)
	}

	p.Do("open the source tab",
		chromedp.Click(chromedp.CSS(`#fn-tabs a[data-tab="source"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#source-code .tok-kw`)),
	)
	keyword, code := p.Text(`#source-code .tok-kw`), p.Text("#source-code")
	if keyword != "package" || !strings.Contains(code, "func Handle(event, request") {
		t.Fatalf("source viewer: first keyword %q, code %q", keyword, code)
	}
	p.Screenshot("source")

	p.Do("open the invocations tab",
		chromedp.Click(chromedp.CSS(`#fn-tabs a[data-tab="invocations"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#invocation-rows tr[data-invocation]`)),
	)
	if history := p.Text("#invocation-rows"); strings.Count(history, "succeeded") != 3 || strings.Count(history, "cold") != 1 {
		t.Fatalf("history shows %q, want 3 succeeded invocations, one of them cold", history)
	}
	if n := p.Eval(`document.querySelectorAll('#invocation-rows tr[data-cold-start="true"]').length`); n != "1" {
		t.Fatalf("%s rows marked as cold starts, want 1", n)
	}

	// A build under way: its log is followed and the view moves on when the build does.
	tn.newFunction(t, "building")
	setStatus(t, tn.ns, "building", "", false)
	p.Do("open the function being built",
		chromedp.Navigate(h.URL+"/console/#/fn/building"),
		chromedp.WaitVisible(chromedp.CSS(`#build-log[data-follow="true"]`)),
	)
	if st, log := p.Text("#build-status"), p.Text("#build-log"); !strings.Contains(st, "Building") || !strings.Contains(log, "Waiting for the build's output") {
		t.Fatalf("while building: status %q, log %q", st, log)
	}
	failBuild(t, tn.ns, "building", "go: cannot find main module")
	p.Wait("the view to follow the build to its failure", `!document.getElementById("fn-build-error").hidden && document.getElementById("build-log").dataset.follow === "false"`)
	if st, msg := p.Text("#build-status"), p.Text("#fn-build-error"); !strings.Contains(st, "Failed") || !strings.Contains(msg, "cannot find main module") {
		t.Fatalf("after the build failed: status %q, error %q", st, msg)
	}

	p.Do("open the failed function",
		chromedp.Navigate(h.URL+"/console/#/fn/broken"),
		chromedp.WaitVisible(chromedp.ID("fn-build-error")),
	)
	if buildErr := p.Text("#fn-build-error"); !strings.Contains(buildErr, "nonexistent-pkg") {
		t.Fatalf("build error view: %q", buildErr)
	}
	p.Screenshot("build-failed")
}

// TestConsoleChartsInChromium draws the invocation charts from records in PostgreSQL: one
// bar per minute of the hour (per quarter hour of the day), the counts of the minutes that
// had invocations, error-rate and p50/p95 points for exactly those.
func TestConsoleChartsInChromium(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	tn := h.tenant()
	h.deploy(tn, "charted", 10)
	now := time.Now()
	minute := func(ago time.Duration) time.Time { return now.Add(-ago).Truncate(time.Minute) } // one bucket each
	var recs []history.Record
	add := func(at time.Time, d time.Duration, code int, cold bool) {
		r := history.HTTPRecord(tn.ns, "charted", at, d, code, "")
		r.ColdStart = cold
		recs = append(recs, r)
		h.history.Record(r)
	}
	add(minute(2*time.Minute), 900*time.Millisecond, 200, true)
	add(minute(2*time.Minute), 40*time.Millisecond, 200, false)
	add(minute(2*time.Minute), 35*time.Millisecond, 500, false)
	add(minute(9*time.Minute), 20*time.Millisecond, 200, false)
	for i := range 5 {
		add(minute(25*time.Minute).Add(time.Duration(i)*time.Second), time.Duration(10+i)*time.Millisecond, 200, false)
	}
	add(minute(47*time.Minute), 5*time.Second, 504, false)
	add(now.Add(-5*time.Hour), 10*time.Millisecond, 200, false) // in the day only
	testkit.WaitFor(t, "the records in PostgreSQL", 30*time.Second, func() bool { return pgtest.CountInvocations(t, h.dbURL, "WHERE namespace = $1", tn.ns) == len(recs) })
	// want is what the chart must show: the count of every non-empty bucket, by its start.
	want := func(span, width time.Duration) string {
		counts := map[time.Time]int{}
		for _, r := range recs {
			if r.Start.After(now.Add(-span + width)) { // clear of the window's moving start
				counts[r.Start.UTC().Truncate(width)]++
			}
		}
		var out []string
		for start, n := range counts {
			out = append(out, fmt.Sprintf("%s=%d", start.Format(time.RFC3339), n))
		}
		sort.Strings(out)
		return strings.Join(out, " ")
	}
	// shown reads the same from the chart's bars.
	const shown = `[...document.querySelectorAll('#chart-invocations g.bucket')].filter((g) => g.dataset.count !== "0")
		.map((g) => new Date(g.dataset.start).toISOString().replace(".000Z", "Z") + "=" + g.dataset.count).sort().join(" ")`

	p := browser.Open(t, 2*time.Minute)
	signIn(p, h.URL, tn, "charted")
	p.Do("open the function", chromedp.Navigate(h.URL+"/console/#/fn/charted"))
	p.Wait("60 bars", `document.querySelectorAll('#chart-invocations g.bucket').length === 60`)
	overviewDrawn(p)
	if got, want := p.Eval(shown), want(time.Hour, time.Minute); got != want {
		t.Fatalf("hour chart bars: %s\nwant %s", got, want)
	}
	for sel, n := range map[string]string{"#chart-errors circle.point": "4", "#chart-duration .p50 circle.point": "4", "#chart-duration .p95 circle.point": "4",
		"#chart-invocations rect.bar": "60", `#chart-invocations g.bucket[data-errors="1"]`: "2"} {
		if got := p.Eval(`document.querySelectorAll('` + sel + `').length`); got != n {
			t.Errorf("%s: %s, want %s", sel, got, n)
		}
	}
	if total := p.Text("#stats-total"); !strings.Contains(total, "10 invocations, 2 failed (20.0%)") {
		t.Errorf("hour total: %q", total)
	}
	p.Screenshot("charts-hour")

	p.Do("show the day", chromedp.Click(chromedp.CSS(`#stats-windows button[data-window="24h"]`)))
	p.Wait("96 bars", `document.querySelectorAll('#chart-invocations g.bucket').length === 96`)
	if got, want := p.Eval(shown), want(24*time.Hour, 15*time.Minute); got != want {
		t.Fatalf("day chart bars: %s\nwant %s", got, want)
	}
	if title := p.Text("#chart-invocations-title"); !strings.Contains(title, "average over 15 minutes") {
		t.Errorf("day chart title %q", title)
	}
	p.Screenshot("charts-day")
}

// TestConsoleInvokeInChromium sends events from the invoke panel: invalid JSON is refused
// before anything is sent; an answer shows its status, duration, cold start and body; the
// function never sees the console's token; an HTML answer stays text and runs nothing.
func TestConsoleInvokeInChromium(t *testing.T) {
	up := newUpstream(t)
	echo := up.Config.Handler
	up.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.Host, "page."):
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, `<img src="x" onerror="document.title='pwned'"><script>document.title='pwned'</script>`)
		case strings.HasPrefix(r.Host, "sleepy."):
			w.Header().Set("X-KEDA-HTTP-Cold-Start", "true") // as the interceptor after a scale from zero
			_, _ = io.WriteString(w, "woken")
		default:
			echo.ServeHTTP(w, r)
		}
	})
	h := newHarness(t, harnessOptions{interceptor: up.URL})
	tn := h.tenant()
	for _, name := range []string{"echo", "page", "sleepy"} {
		h.deploy(tn, name, 10)
	}
	p := browser.Open(t, 2*time.Minute)
	signIn(p, h.URL, tn, "echo")
	invoke := func(fn, event string) {
		t.Helper()
		p.Do("open the invoke panel of "+fn,
			chromedp.Navigate(h.URL+"/console/#/fn/"+fn+"/invoke"),
			chromedp.WaitVisible(chromedp.ID("event")),
			chromedp.SetValue(chromedp.ID("event"), event),
			chromedp.Evaluate[chromedp.Void](`document.getElementById("invoke-result").hidden = true`),
			chromedp.Click(chromedp.ID("invoke-send")),
		)
	}

	invoke("echo", `{"hello": "console",`)
	p.Wait("the JSON error", `document.getElementById("invoke-error").textContent !== ""`)
	if msg := p.Text("#invoke-error"); !strings.Contains(msg, "not valid JSON") || !strings.Contains(msg, "Nothing was sent") {
		t.Fatalf("invalid event: %q", msg)
	}
	time.Sleep(300 * time.Millisecond) // what a wrongly sent request would need to be recorded
	if n := pgtest.CountInvocations(t, h.dbURL, "WHERE namespace = $1", tn.ns); n != 0 {
		t.Fatalf("an invalid event was sent: %d invocations recorded", n)
	}

	invoke("echo", `{"hello": "console"}`)
	p.Wait("the answer", `!document.getElementById("invoke-result").hidden`)
	status, cold, duration, body := p.Text("#invoke-status"), p.Eval(`document.getElementById("invoke-cold").dataset.cold`), p.Text("#invoke-duration"), p.Text("#invoke-body")
	if status != "200 OK" || cold != "false" || !strings.HasSuffix(p.Text("#invoke-cold"), "no") || !strings.Contains(duration, " ms") {
		t.Fatalf("echo: status %q cold %q duration %q", status, cold, duration)
	}
	if !strings.Contains(body, `"Body": "{\"hello\": \"console\"}"`) || !strings.Contains(body, `"Method": "POST"`) || strings.Contains(body, tn.token) || strings.Contains(body, "Authorization") {
		t.Fatalf("echo: the function got %s; want the event as sent and no credentials", body)
	}
	p.Screenshot("invoke-echo")

	invoke("sleepy", `{}`)
	p.Wait("the answer", `!document.getElementById("invoke-result").hidden`)
	if status, cold := p.Text("#invoke-status"), p.Text("#invoke-cold"); status != "200 OK" || !strings.HasPrefix(cold, "yes") || p.Text("#invoke-body") != "woken" {
		t.Fatalf("sleepy: status %q cold start %q", status, cold)
	}

	invoke("page", `{}`)
	p.Wait("the answer", `!document.getElementById("invoke-result").hidden`)
	if body, title := p.Text("#invoke-body"), p.Eval("document.title"); !strings.Contains(body, "<script>document.title='pwned'</script>") || title != "sless console" {
		t.Fatalf("an HTML answer: body %q, title %q; want the markup as text and nothing run", body, title)
	}
	if n := p.Eval(`document.querySelectorAll("#invoke-body *").length`); n != "0" {
		t.Fatalf("the HTML answer became %s elements", n)
	}
	p.Screenshot("invoke-html-as-text")
}

// overviewDrawn waits until the overview's parts that load on their own (the build log, the
// charts) are drawn, so nothing moves under a click.
func overviewDrawn(p *browser.Page) {
	p.Wait("the overview drawn", `document.getElementById("build-log").dataset.state !== "loading" && document.querySelector("#chart-duration svg")`)
}

// failBuild writes the status of a failed build, as the reconciler would.
func failBuild(t *testing.T, ns, name, msg string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var fn v1alpha1.Function
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &fn); err != nil {
			return err
		}
		fn.Status.Phase, fn.Status.LastBuildError, fn.Status.ObservedGeneration = v1alpha1.FunctionFailed, msg, fn.Generation
		return env.Client.Status().Update(context.Background(), &fn)
	})
	if err != nil {
		t.Fatal(err)
	}
}
