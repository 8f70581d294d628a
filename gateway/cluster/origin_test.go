package cluster_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"sless.dev/sless/test/browser"
)

func serveAttack(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, "/sw.js") {
		w.Header().Set("Content-Type", "text/javascript")
		w.Header().Set("Service-Worker-Allowed", "/")
		_, _ = io.WriteString(w, browser.TakeoverWorker)
		return
	}
	w.Header().Set("Content-Type", "text/html")
	_, _ = io.WriteString(w, browser.TakeoverPage)
}

// TestServiceWorkerTakeoverInChromium is attack 1 of issue 14 in a real browser: a public
// function's page, opened in the tab where the console is signed in, can neither read the
// console's token nor register a service worker over the gateway's origin; afterwards the
// console is the real one and its /v1 calls work. On the function's own host (an origin of
// its own) the same page may register its worker, which still cannot reach the console.
func TestServiceWorkerTakeoverInChromium(t *testing.T) {
	up := newUpstream(t)
	up.Config.Handler = http.HandlerFunc(serveAttack)
	h := newHarness(t, harnessOptions{interceptor: up.URL, functionsDomain: "fn.localhost"})
	tn := h.tenant()
	fnURL := h.deploy(tn, "evil", 0)
	bctx := newBrowser(t)
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	title := func() string {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			s, err := chromedp.Run(bctx, chromedp.Title())
			if err != nil {
				t.Fatal(err)
			}
			if s != "loading" || time.Now().After(deadline) {
				return s
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	eval := func(js string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Evaluate[string](js, chromedp.EvalAsValue, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("evaluate %s: %v", js, err)
		}
		return s
	}
	signedIn := func(what string) {
		t.Helper()
		run(what, chromedp.Navigate(h.URL+"/console/"), chromedp.WaitVisible(chromedp.CSS(`tr[data-function="evil"]`)))
		if got := title(); got != "sless console" {
			t.Fatalf("%s: the console's title is %q", what, got)
		}
		if n := eval(`navigator.serviceWorker.getRegistrations().then(r => String(r.length))`); n != "0" {
			t.Fatalf("%s: %s service workers registered on the gateway's origin", what, n)
		}
		if s := eval(`fetch("/v1/whoami", {headers: {Authorization: "Bearer " + sessionStorage.getItem("sless.token")}}).then(r => r.text())`); !strings.Contains(s, tn.ns) {
			t.Fatalf("%s: /v1/whoami from the console answered %q", what, s)
		}
	}

	run("sign in", chromedp.Navigate(h.URL+"/console/"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), tn.token), chromedp.Click(chromedp.ID("signin-button")),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-function="evil"]`)))
	run("open the function in the same tab", chromedp.Navigate(fnURL+"/"))
	got := title()
	if strings.Contains(got, tn.token) || strings.Contains(got, "sw:registered") || !strings.Contains(got, "storage:SecurityError") {
		t.Fatalf("the function's page on the shared origin: %q; want no token and no service worker", got)
	}
	signedIn("the console after the function's page")

	// The function's own host: a separate origin, where its worker is its own business.
	u, _ := url.Parse(h.URL)
	run("open the function on its own host", chromedp.Navigate("http://evil."+tn.ns+".fn.localhost:"+u.Port()+"/"))
	if got := title(); !strings.Contains(got, "token:null") || !strings.Contains(got, "sw:registered") {
		t.Fatalf("the function's page on its own host: %q; want its own (empty) storage and its worker registered", got)
	}
	signedIn("the console after the function registered a worker on its own host")
}
