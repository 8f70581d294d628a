package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
	"sless.dev/sless/test/browser"
	"sless.dev/sless/test/testkit"
)

var consoleURLRE = regexp.MustCompile(`(?m)^  console\s+(\S+)$`)

// TestConsoleOnDevInChromium is the console against a real `sless dev`, in a real browser:
// the banner's console URL signs in at once and leaves no token in the address bar; the
// invoke panel shows a cold start, then a warm call; the logs tab follows what the function
// prints (a line from an invoke made while tailing, stderr marked) and stops when left; the
// chart counts the invocations from the in-memory history; a build that fails shows its log.
func TestConsoleOnDevInChromium(t *testing.T) {
	browser.Need(t)
	out, _ := runDevCmd(t, "--data-dir", devDataDir(t), "--listen", "127.0.0.1:0")
	text := waitOutput(t, out, "export SLESS_TOKEN=", time.Minute)
	d := sessionOf(t, text)
	endpoint, token := d.endpoint, d.token
	m := consoleURLRE.FindStringSubmatch(text)
	if m == nil || m[1] != endpoint+"/console/#token="+token {
		t.Fatalf("the banner's console line is %q, want %s/console/#token=<the token>:\n%s", m, endpoint, text)
	}
	consoleURL := m[1]
	d.deployPython(t, "talker", echoHandler, 10)
	d.uploadPython(t, "broken", "def handle(event):\n    return (\n", api.FunctionFields{}, "Failed", func(s api.FunctionStatus) bool { return s.Phase == api.PhaseFailed })

	p := browser.Open(t, 3*time.Minute)
	p.Do("open the banner's console URL", chromedp.Navigate(consoleURL), chromedp.WaitVisible(chromedp.CSS(`tr[data-function="talker"]`)))
	if href := p.Eval("location.href"); strings.Contains(href, token) || strings.Contains(href, "token=") || href != endpoint+"/console/" {
		t.Fatalf("after signing in from the fragment the address is %q; want %s/console/ without the token", href, endpoint)
	}
	if stored := p.Eval(`sessionStorage.getItem("sless.token")`); stored != token {
		t.Fatalf("the console keeps %q, want the fragment's token", stored)
	}
	if who := p.Text("#who"); !strings.Contains(who, d.ns) {
		t.Fatalf("signed in as %q, want namespace %s", who, d.ns)
	}
	p.Screenshot("signed-in-from-fragment")

	invoke := func(say string) {
		t.Helper()
		p.Do("invoke from the panel",
			chromedp.SetValue(chromedp.ID("event"), `{"say": "`+say+`"}`),
			chromedp.Evaluate[chromedp.Void](`document.getElementById("invoke-result").hidden = true`),
			chromedp.Click(chromedp.ID("invoke-send")))
		p.Wait("the answer", `!document.getElementById("invoke-result").hidden`)
	}
	p.Do("open the invoke panel", chromedp.Navigate(endpoint+"/console/#/fn/talker/invoke"), chromedp.WaitVisible(chromedp.ID("event")))
	invoke("from the panel")
	if status, cold, body := p.Text("#invoke-status"), p.Text("#invoke-cold"), p.Text("#invoke-body"); status != "200 OK" || !strings.HasPrefix(cold, "yes") || !strings.Contains(body, `"say": "from the panel"`) {
		t.Fatalf("first call: status %q, cold start %q, body %q", status, cold, body)
	}
	p.Screenshot("invoke-cold")
	invoke("again")
	if status, cold := p.Text("#invoke-status"), p.Text("#invoke-cold"); status != "200 OK" || cold != "no" {
		t.Fatalf("second call: status %q, cold start %q; want a warm 200", status, cold)
	}
	if rev := p.Text("#invoke-revision"); rev != "talker-1" {
		t.Fatalf("the invoke panel shows revision %q, want talker-1", rev)
	}

	p.Do("open the logs tab", chromedp.Click(chromedp.CSS(`#fn-tabs a[data-tab="logs"]`)))
	p.Wait("the panel's lines", `[...document.querySelectorAll("#logs .log-line")].some((l) => l.textContent.includes("echo again"))`)
	p.Wait("the stream", `document.getElementById("logs-state").textContent === "following"`)
	marker := "while tailing " + randomMarker(t)
	post(t, d.endpoint+"/fn/"+d.ns+"/talker", `{"say": "`+marker+`"}`)
	p.Wait("the line printed while tailing", `[...document.querySelectorAll("#logs .log-line")].some((l) => l.textContent.includes("echo `+marker+`"))`)
	line := p.Eval(`[...document.querySelectorAll("#logs .log-line")].filter((l) => l.textContent.includes("echo ` + marker + `")).map((l) =>
		[l.dataset.stream, l.querySelector(".log-instance").textContent !== "", /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}$/.test(l.querySelector(".log-time").textContent)].join(" "))[0]`)
	if line != "stdout true true" {
		t.Fatalf("the tailed line: stream, instance shown, time shown = %q", line)
	}
	if n := p.Eval(`document.querySelectorAll("#logs .log-line.stderr").length`); n == "0" {
		t.Fatal("no stderr line marked in the logs tab")
	}
	p.Screenshot("logs")

	p.Do("leave the logs tab", chromedp.Click(chromedp.CSS(`#fn-tabs a[data-tab="overview"]`)))
	p.Wait("the chart", `document.querySelectorAll("#chart-invocations g.bucket").length === 60`)
	after := "after leaving " + randomMarker(t)
	post(t, d.endpoint+"/fn/"+d.ns+"/talker", `{"say": "`+after+`"}`)
	// The chart read the memory store before that call: the three calls before it.
	if sum := p.Eval(`[...document.querySelectorAll("#chart-invocations g.bucket")].reduce((n, g) => n + Number(g.dataset.count), 0)`); sum != "3" {
		t.Errorf("the hour's bars count %s invocations, want the 3 made before the overview opened", sum)
	}
	time.Sleep(time.Second) // the line is in the log file by now; a live stream would have shown it
	if shown := p.Eval(`document.getElementById("logs").textContent.includes("` + after + `")`); shown != "false" {
		t.Fatal("the logs tab kept following after it was left")
	}
	p.Screenshot("overview")

	p.Do("open the failed build", chromedp.Navigate(endpoint+"/console/#/fn/broken"), chromedp.WaitVisible(chromedp.ID("fn-build-error")))
	p.Wait("the build log", `document.getElementById("build-log").dataset.state === "done"`)
	if buildLog, buildErr := p.Text("#build-log"), p.Text("#fn-build-error"); !strings.Contains(buildLog, "SyntaxError") || !strings.Contains(buildErr, "SyntaxError") {
		t.Fatalf("failed build: log %q, error %q; want the compiler's SyntaxError in both", buildLog, buildErr)
	}
	if phase := p.Text("#build-status"); !strings.Contains(phase, "Failed") {
		t.Fatalf("build status %q", phase)
	}
	p.Screenshot("build-failed")

	// Revisions: a new environment is talker-2 with all the traffic; the rollback button
	// sends every call back to talker-1.
	if _, err := d.c.UpdateFunction(context.Background(), d.ns, "talker", api.FunctionFields{EnvVars: &map[string]string{"V": "2"}}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "talker-2 ready", time.Minute, func() bool {
		fn, err := d.c.GetFunction(context.Background(), d.ns, "talker")
		return err == nil && fn.Status.Ready && fn.Status.LatestReadyRevision == "talker-2"
	})
	p.Do("open the revisions tab", chromedp.Navigate(endpoint+"/console/#/fn/talker/revisions"), chromedp.WaitVisible(chromedp.CSS(`tr[data-revision-row="talker-1"]`)))
	row := func(rev string) string { return p.Text(`tr[data-revision-row="` + rev + `"]`) }
	if r1, r2 := row("talker-1"), row("talker-2"); !strings.Contains(r1, "ready") || !strings.Contains(r1, "0%") || !strings.Contains(r2, "100%") {
		t.Fatalf("revision rows: %q / %q", r1, r2)
	}
	p.Screenshot("revisions")
	p.Do("roll back", chromedp.Click(chromedp.ID("rollback")))
	p.Wait("talker-1 with all traffic", `(document.querySelector('tr[data-revision-row="talker-1"]') || {}).textContent.includes("100%")`)
	if line := p.Text("#traffic-line"); !strings.Contains(line, "talker-1 100%") {
		t.Fatalf("traffic line after the rollback: %q", line)
	}
	resp, err := http.Post(d.endpoint+"/fn/"+d.ns+"/talker", "application/json", strings.NewReader(`{"say": "x"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if rev := resp.Header.Get(rules.HeaderRevision); rev != "talker-1" {
		t.Fatalf("after the console's rollback a call went to %q", rev)
	}
	p.Screenshot("rolled-back")

	// A stream is shown as it arrives: its first event while the handler still sleeps, then
	// the rest; the invocations tab marks the call as streamed.
	d.deployPython(t, "ticker", tickerHandler, 30)
	p.Do("open ticker's invoke panel", chromedp.Navigate(endpoint+"/console/#/fn/ticker/invoke"), chromedp.WaitVisible(chromedp.ID("event")))
	p.Do("invoke the stream", chromedp.SetValue(chromedp.ID("event"), `{}`), chromedp.Click(chromedp.ID("invoke-send")))
	p.Wait("the first event while the stream is open", `document.getElementById("invoke-body").dataset.streaming === "true" &&
		document.getElementById("invoke-body").textContent.includes("data: tick 0")`)
	if body := p.Text("#invoke-body"); strings.Contains(body, "tick 2") {
		t.Fatalf("the stream was shown whole, not as it arrived: %q", body)
	}
	p.Screenshot("invoke-streaming")
	p.Wait("the stream's end", `document.getElementById("invoke-body").dataset.streaming === "false"`)
	if body, took := p.Text("#invoke-body"), p.Text("#invoke-duration"); !strings.Contains(body, "data: tick 1") || !strings.Contains(body, "data: tick 2") || !strings.Contains(took, "first byte after") {
		t.Fatalf("the whole stream: %q, %q", body, took)
	}
	p.Do("open ticker's invocations", chromedp.Navigate(endpoint+"/console/#/fn/ticker/invocations"), chromedp.WaitVisible(chromedp.CSS(`tr[data-invocation]`)))
	if marked := p.Eval(`document.querySelector("tr[data-invocation] .badge.stream") !== null`); marked != "true" {
		t.Fatal("the streamed call is not marked as a stream in the invocations tab")
	}

	// The browser's own EventSource takes the events one by one, as they are sent.
	p.Eval(`(() => { window.ticks = []; const es = new EventSource("/fn/` + d.ns + `/ticker");
		es.onmessage = (e) => { ticks.push([e.data, performance.now()]); if (ticks.length === 3) es.close(); }; return "listening"; })()`)
	p.Wait("three events in EventSource", `window.ticks.length === 3`)
	if got := p.Eval(`ticks.map((t) => t[0]).join(",") + " " + (ticks[2][1] - ticks[0][1] >= 1500)`); got != "tick 0,tick 1,tick 2 true" {
		t.Fatalf("EventSource got %q; want the three events, the last at least 1.5 s after the first", got)
	}
}

// tickerHandler streams three Server-Sent Events a second apart.
const tickerHandler = `import time


def handle(event):
    yield {"statusCode": 200, "headers": {"Content-Type": "text/event-stream"}}
    for i in range(3):
        if i:
            time.sleep(1)
        yield "tick %d" % i
`

func post(t *testing.T, url, body string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, b)
	}
}

func randomMarker(t *testing.T) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
