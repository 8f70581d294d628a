package cluster_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway/api"
)

// chromiumPath finds the browser: $SLESS_CHROMIUM, or Debian's chromium on PATH (installed by
// test/tools/deps.sh).
func chromiumPath(t *testing.T) string {
	if p := os.Getenv("SLESS_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium: install it with test/tools/deps.sh (apt-get install chromium) or set SLESS_CHROMIUM")
	return ""
}

// newBrowser starts headless Chromium with a fresh profile for the test; it stops with it.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.NoFirstRun, chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	bctx, cancelTimeout := context.WithTimeout(bctx, 90*time.Second)
	t.Cleanup(cancelTimeout)
	return bctx
}

// TestConsoleInChromium signs in with a token, sees the tenant's functions with badges and
// build errors, opens the highlighted source, reads the invocation history and toggles a
// trigger, in a real headless browser.
func TestConsoleInChromium(t *testing.T) {
	up := newUpstream(t)
	h := newHarness(t, harnessOptions{interceptor: up.URL})
	tn := h.tenant()
	ctx := context.Background()
	fnURL := h.deploy(tn, "greeter", 10)
	if _, err := tn.c.UploadSource(ctx, tn.ns, "greeter", bytes.NewReader(zipOf(t, map[string]string{
		"handler.go": goHandler, "README.md": "# greeter\n"}))); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.c.CreateTrigger(ctx, tn.ns, api.CreateTrigger{Name: "web", TriggerFields: api.TriggerFields{Type: ptr("http"), Function: ptr("greeter")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.c.CreateTrigger(ctx, tn.ns, api.CreateTrigger{Name: "hourly", TriggerFields: api.TriggerFields{Type: ptr("cron"), Function: ptr("greeter"), Schedule: ptr("@hourly")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.c.CreateFunction(ctx, tn.ns, api.CreateFunction{Name: "broken", FunctionFields: api.FunctionFields{Runtime: ptr("python3.12")}}); err != nil {
		t.Fatal(err)
	}
	failBuild(t, tn.ns, "broken", "pip install: No matching distribution found for nonexistent-pkg")
	for range 3 {
		do(t, "GET", fnURL+"/echo", "", "", nil)
	}
	waitFor(t, 10*time.Second, "3 invocation rows", func() bool { return countRows(t, h.dbURL, tn.ns) == 3 })
	// Another tenant's function must not show up.
	other := h.tenant()
	if _, err := other.c.CreateFunction(ctx, other.ns, api.CreateFunction{Name: "secret", FunctionFields: api.FunctionFields{Runtime: ptr("go1.23")}}); err != nil {
		t.Fatal(err)
	}

	bctx := newBrowser(t)
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	step("sign in",
		chromedp.Navigate(h.URL+"/console"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), tn.token),
		chromedp.Click(chromedp.ID("signin-button")),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-function="greeter"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-function="broken"]`)),
	)
	rows, broken, kinds, who := text("#function-rows"), text(`tr[data-function="broken"]`), text(`tr[data-function="greeter"] td:nth-child(3)`), text("#who")
	if !strings.Contains(who, tn.ns) || strings.Contains(rows, "secret") || !strings.Contains(rows, "/fn/"+tn.ns+"/greeter") {
		t.Fatalf("list: who %q rows %q", who, rows)
	}
	if !strings.Contains(broken, "Failed") || !strings.Contains(broken, "build failed") || !strings.Contains(kinds, "cron") || !strings.Contains(kinds, "http") {
		t.Fatalf("badges: broken %q, greeter kinds %q", broken, kinds)
	}

	step("open the function",
		chromedp.Click(chromedp.CSS(`tr[data-function="greeter"] a`)),
		chromedp.WaitVisible(chromedp.CSS(`#source-code .tok-kw`)),
		chromedp.WaitVisible(chromedp.CSS(`#invocation-rows tr[data-invocation]`)),
	)
	keyword, code, history := text(`#source-code .tok-kw`), text("#source-code"), text("#invocation-rows")
	if keyword != "package" || !strings.Contains(code, "func Handle(event, request") {
		t.Fatalf("source viewer: first keyword %q, code %q", keyword, code)
	}
	if strings.Count(history, "succeeded") != 3 {
		t.Fatalf("history shows %q, want 3 succeeded invocations", history)
	}
	step("disable the cron trigger",
		chromedp.Click(chromedp.CSS(`button[data-trigger="hourly"]`)),
		chromedp.WaitVisible(chromedp.Search(`//tr[@data-trigger-row="hourly"]/td[text()="disabled"]`)),
	)
	trg, err := tn.c.GetTrigger(ctx, tn.ns, "hourly")
	if err != nil || trg.Enabled || !strings.Contains(text(`tr[data-trigger-row="hourly"]`), "Enable") {
		t.Fatalf("after clicking Disable: trigger %+v (%v)", trg.TriggerSpec, err)
	}

	step("open the failed function",
		chromedp.Navigate(h.URL+"/console/#/fn/broken"),
		chromedp.WaitVisible(chromedp.ID("fn-build-error")),
	)
	if buildErr := text("#fn-build-error"); !strings.Contains(buildErr, "nonexistent-pkg") {
		t.Fatalf("build error view: %q", buildErr)
	}
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
