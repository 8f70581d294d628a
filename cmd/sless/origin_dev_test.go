package main

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"sless.dev/sless/test/browser"
)

// takeoverHandler serves the takeover page and its worker through response control.
var takeoverHandler = `PAGE = r'''` + browser.TakeoverPage + `'''
WORKER = r'''` + browser.TakeoverWorker + `'''

def handle(event, request):
    if request["path"].endswith("/sw.js"):
        return {"statusCode": 200, "headers": {"Content-Type": "text/javascript", "Service-Worker-Allowed": "/"}, "body": WORKER}
    return {"statusCode": 200, "headers": {"Content-Type": "text/html"}, "body": PAGE}
`

// TestServiceWorkerTakeoverOnDevInChromium is attack 1 of issue 14 where it was found: on a
// real `sless dev`, a function's page opened in the tab where the console is signed in
// reads no token and registers no service worker over the gateway's origin, and the console
// afterwards is the real one with working /v1 calls.
func TestServiceWorkerTakeoverOnDevInChromium(t *testing.T) {
	d := startDevSession(t)
	d.deployPython(t, "evil", takeoverHandler, 10)
	p := browser.Open(t, 3*time.Minute)
	signedIn := func(what string) {
		t.Helper()
		p.Do(what, chromedp.Navigate(d.endpoint+"/console/"), chromedp.WaitVisible(chromedp.CSS(`tr[data-function="evil"]`)))
		if got := p.Eval("document.title"); got != "sless console" {
			t.Fatalf("%s: the console's title is %q", what, got)
		}
		if n := p.Eval(`navigator.serviceWorker.getRegistrations().then(r => r.length)`); n != "0" {
			t.Fatalf("%s: %s service workers registered on the gateway's origin", what, n)
		}
		if s := p.Eval(`fetch("/v1/whoami", {headers: {Authorization: "Bearer " + sessionStorage.getItem("sless.token")}}).then(r => r.text())`); !strings.Contains(s, d.ns) {
			t.Fatalf("%s: /v1/whoami from the console answered %q", what, s)
		}
	}

	p.Do("sign in from the banner's URL", chromedp.Navigate(d.endpoint+"/console/#token="+d.token),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-function="evil"]`)))
	p.Do("open the function in the same tab", chromedp.Navigate(d.endpoint+"/fn/"+d.ns+"/evil/"))
	p.Wait("the function's page to report", `document.title !== "loading"`)
	got := p.Eval("document.title")
	if strings.Contains(got, d.token) || strings.Contains(got, "sw:registered") || !strings.Contains(got, "storage:SecurityError") {
		t.Fatalf("the function's page on the gateway's origin: %q; want no token and no service worker", got)
	}
	p.Screenshot("takeover-refused")
	signedIn("the console after the function's page")
}
