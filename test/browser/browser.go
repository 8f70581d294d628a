// Package browser drives a real headless Chromium for tests (chromedp over CDP) and keeps
// screenshots of what it showed.
package browser

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"sless.dev/sless/test/testkit"
)

// Need skips t under -short (make test-unit), which runs no browser; Path, New and Open call
// it, and a test that prepares much before it opens the browser calls it first.
func Need(t testing.TB) {
	t.Helper()
	testkit.NeedsHeavy(t, "Chromium")
}

// Path finds the browser: $SLESS_CHROMIUM, or Debian's chromium on PATH (installed by
// test/tools/deps.sh).
func Path(t testing.TB) string {
	t.Helper()
	Need(t)
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

// New starts headless Chromium with a fresh profile and a 1280×900 window for the test; it
// stops with it, and every action on the context fails after timeout.
func New(t testing.TB, timeout time.Duration) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(Path(t)), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.NoFirstRun, chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	bctx, cancelTimeout := context.WithTimeout(bctx, timeout)
	t.Cleanup(cancelTimeout)
	return bctx
}

// Page is a browser tab of a test whose every step fails the test with what it was doing.
type Page struct {
	t   testing.TB
	ctx context.Context
}

// Open starts a browser for the test (see New) with its tab.
func Open(t testing.TB, timeout time.Duration) *Page {
	t.Helper()
	return &Page{t: t, ctx: New(t, timeout)}
}

// Context is the tab's chromedp context, for actions the helpers do not cover.
func (p *Page) Context() context.Context { return p.ctx }

// Do runs actions in order.
func (p *Page) Do(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, actions...); err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
}

// Text is the visible text of the first element matching the CSS selector.
func (p *Page) Text(sel string) string {
	p.t.Helper()
	s, err := chromedp.Run(p.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		p.t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// Eval is the value of a JavaScript expression (a promise is awaited) as a string.
func (p *Page) Eval(js string) string {
	p.t.Helper()
	s, err := chromedp.Run(p.ctx, chromedp.Evaluate[string]("Promise.resolve("+js+").then(String)", chromedp.EvalAsValue, chromedp.EvalAwaitPromise))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", js, err)
	}
	return s
}

// Wait polls a JavaScript expression until it is truthy, for up to 30 seconds (an
// expression that throws fails after those 30 seconds too, not at the browser's timeout).
func (p *Page) Wait(what, js string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](js, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		p.t.Fatalf("waiting for %s (%s): %v", what, js, err)
	}
}

// Screenshot saves the whole page as <name>.png in the test's artifact directory (kept with
// `go test -artifacts -outputdir DIR`, a temporary directory otherwise) and logs where.
func (p *Page) Screenshot(name string) {
	p.t.Helper()
	png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(p.t.ArtifactDir(), name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot %s", path)
}
