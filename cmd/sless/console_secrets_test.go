package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"k8s.io/utils/ptr"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/test/browser"
)

// recordResponses keeps the body of every /v1 answer the page fetches (log streams aside) in
// window.__slessResponses, installed before the console's own scripts run.
const recordResponses = `(() => {
  const seen = (window.__slessResponses = []);
  const fetch = window.fetch.bind(window);
  window.fetch = async (input, init) => {
    const resp = await fetch(input, init);
    const url = String((input && input.url) || input);
    if (url.includes("/v1/") && !/\/logs(\?|$)/.test(url)) resp.clone().text().then((t) => seen.push(url + " " + resp.status + " " + t), () => {});
    return resp;
  };
})();`

// TestConsoleSecretsInChromium is the console's secrets view against a real `sless dev`, in a
// real browser: a secret created from the form is listed with its keys and version 1, and
// the values typed never show again (not in the DOM, its text, an input, the tab's storage
// nor any API answer the page read); a rotation asks for every key's value, refuses one left
// empty, and makes version 2; a function's detail view shows its secret references by name,
// marking a missing key and a missing secret; deleting a secret in use shows the server's
// refusal naming the function, and succeeds once the function is gone.
func TestConsoleSecretsInChromium(t *testing.T) {
	browser.Need(t)
	d := startDevSession(t)
	consoleURL := d.endpoint + "/console/#token=" + d.token

	p := browser.Open(t, 3*time.Minute)
	if _, err := chromedp.Call(p.Context(), page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: recordResponses}); err != nil {
		t.Fatal(err)
	}
	p.Do("sign in", chromedp.Navigate(consoleURL), chromedp.WaitVisible(chromedp.ID("functions")))
	p.Do("open the secrets view", chromedp.Click(chromedp.CSS(`#nav a[data-nav="secrets"]`)), chromedp.WaitVisible(chromedp.ID("secret-form")))
	p.Wait("the list", `document.getElementById("secrets").dataset.state === "loaded"`)
	if empty := p.Eval(`!document.getElementById("secrets-empty").hidden`); empty != "true" {
		t.Fatal("a namespace without secrets does not say so")
	}
	if input := p.Eval(`(() => { const v = document.querySelector("#secret-keys .secret-value"); return v.type + " " + v.autocomplete + " " + v.spellcheck; })()`); input != "password new-password false" {
		t.Fatalf("the value input is %q; want a password field, never autofilled nor spellchecked", input)
	}

	// noMarker fails the test if the page holds or has read any of the values.
	noMarker := func(when string, markers ...string) {
		t.Helper()
		for _, m := range markers {
			where := p.Eval(`(() => { const m = "` + m + `"; const found = [];
				if (document.documentElement.outerHTML.includes(m)) found.push("DOM");
				if (document.body.innerText.includes(m)) found.push("text");
				if ([...document.querySelectorAll("input, textarea")].some((e) => e.value.includes(m))) found.push("an input");
				if (JSON.stringify({ ...sessionStorage, ...localStorage }).includes(m)) found.push("storage");
				if (window.__slessResponses.some((r) => r.includes(m))) found.push("an API answer");
				return found.join(", "); })()`)
			if where != "" {
				t.Fatalf("%s, a secret's value is in the page: %s", when, where)
			}
		}
	}

	password, user := "pw-"+randomMarker(t), "user-"+randomMarker(t)
	p.Do("fill the new secret",
		chromedp.SetValue(chromedp.ID("secret-name"), "db"),
		chromedp.SendKeys(chromedp.CSS(`#secret-keys tr:nth-child(1) .secret-key`), "PASSWORD"),
		chromedp.SendKeys(chromedp.CSS(`#secret-keys tr:nth-child(1) .secret-value`), password),
		chromedp.Click(chromedp.ID("secret-add-key")),
		chromedp.SendKeys(chromedp.CSS(`#secret-keys tr:nth-child(2) .secret-key`), "USER"),
		chromedp.SendKeys(chromedp.CSS(`#secret-keys tr:nth-child(2) .secret-value`), user))
	p.Screenshot("secret-new")
	p.Do("create it", chromedp.Click(chromedp.ID("secret-save")))
	p.Wait("the created secret", `document.querySelector('tr[data-secret="db"]') && document.getElementById("secrets-notice").textContent.startsWith("Created db")`)
	keys := `[...document.querySelectorAll('tr[data-secret="db"] td.keys code')].map((c) => c.textContent).join(",")`
	if k, v := p.Eval(keys), p.Text(`tr[data-secret="db"] td.version`); k != "PASSWORD,USER" || v != "1" {
		t.Fatalf("the list shows db with keys %q, version %q; want PASSWORD,USER and 1", k, v)
	}
	if read := p.Eval(`window.__slessResponses.some((r) => r.includes("/secrets ") && r.includes('"PASSWORD"'))`); read != "true" {
		t.Fatalf("no list of secrets among the answers recorded: %s", p.Eval(`JSON.stringify(window.__slessResponses)`))
	}
	noMarker("after creating the secret", password, user)
	p.Screenshot("secret-created")

	// A rotation shows the keys with empty values and sends nothing until each has one.
	p.Do("open the rotation", chromedp.Click(chromedp.CSS(`button[data-rotate="db"]`)))
	p.Wait("the rotation form", `(() => { const f = document.getElementById("secret-form"); return !f.hidden && f.dataset.mode === "rotate"; })()`)
	if rows := p.Eval(`[...document.querySelectorAll("#secret-keys tr")].map((r) => r.dataset.key + "=" + r.querySelector(".secret-value").value).join(",")`); rows != "PASSWORD=,USER=" {
		t.Fatalf("the rotation's rows are %q; want every key with an empty value", rows)
	}
	if note := p.Text("#secret-form-note"); !strings.Contains(note, "All values are replaced: enter every key") {
		t.Fatalf("the rotation's note %q does not say every value is replaced", note)
	}
	password2, user2 := "pw2-"+randomMarker(t), "user2-"+randomMarker(t)
	p.Do("rotate with one value", chromedp.SendKeys(chromedp.CSS(`#secret-keys tr[data-key="PASSWORD"] .secret-value`), password2), chromedp.Click(chromedp.ID("secret-save")))
	if msg := p.Text("#secret-form-error"); !strings.Contains(msg, "Enter a value for USER") {
		t.Fatalf("a rotation without USER's value: %q", msg)
	}
	if s, err := d.c.GetSecret(context.Background(), d.ns, "db"); err != nil || s.Version != 1 {
		t.Fatalf("after the refused rotation db is %+v, %v; want version 1", s, err)
	}
	// USER's new value goes in the multi-line field, which is not autofilled nor spellchecked either.
	p.Do("rotate with both", chromedp.Click(chromedp.CSS(`#secret-keys tr[data-key="USER"] .secret-multiline`)),
		chromedp.SendKeys(chromedp.CSS(`#secret-keys tr[data-key="USER"] textarea.secret-value`), user2+"\nsecond line"))
	if area := p.Eval(`(() => { const v = document.querySelector('#secret-keys tr[data-key="USER"] .secret-value'); return v.tagName + " " + v.autocomplete + " " + v.spellcheck; })()`); area != "TEXTAREA off false" {
		t.Fatalf("the multi-line value field is %q; want a textarea, never autofilled nor spellchecked", area)
	}
	p.Screenshot("secret-rotate")
	p.Do("rotate", chromedp.Click(chromedp.ID("secret-save")))
	p.Wait("the rotated secret", `document.getElementById("secrets-notice").textContent.startsWith("Rotated db to version 2") && document.getElementById("secrets").dataset.state === "loaded"`)
	if k, v := p.Eval(keys), p.Text(`tr[data-secret="db"] td.version`); k != "PASSWORD,USER" || v != "2" {
		t.Fatalf("after the rotation the list shows db with keys %q, version %q; want PASSWORD,USER and 2", k, v)
	}
	if mode := p.Eval(`document.getElementById("secret-form").dataset.mode + " " + location.hash`); mode != "create #/secrets" {
		t.Fatalf("after the rotation the form and address are %q", mode)
	}
	// The gateway holds the rotated values (what a function gets is the devplane's tests').
	if s, err := d.c.GetSecret(context.Background(), d.ns, "db"); err != nil || s.Version != 2 || strings.Join(s.Keys, ",") != "PASSWORD,USER" {
		t.Fatalf("after the rotation db is %+v, %v; want version 2 with keys PASSWORD and USER", s, err)
	}
	noMarker("after rotating the secret", password, user, password2, user2)

	// A function's references, by name, the missing ones marked.
	ctx := context.Background()
	if _, err := d.c.CreateFunction(ctx, d.ns, api.CreateFunction{Name: "user", FunctionFields: api.FunctionFields{
		Runtime:     ptr.To("python3.11"),
		SecretEnv:   &[]api.SecretEnv{{Name: "DB_PASSWORD", Secret: "db", Key: "PASSWORD"}, {Name: "DB_HOST", Secret: "db", Key: "HOST"}},
		SecretFiles: &[]api.SecretFile{{Secret: "db"}, {Secret: "tls", Path: "/run/tls"}},
	}}); err != nil {
		t.Fatal(err)
	}
	p.Do("open the function", chromedp.Navigate(d.endpoint+"/console/#/fn/user"), chromedp.WaitVisible(chromedp.CSS(`#fn-secrets li[data-secret-env="DB_PASSWORD"]`)))
	p.Wait("the references checked", `document.querySelector("#fn-secrets .badge")`)
	refs := p.Eval(`[...document.querySelectorAll("#fn-secrets li")].map((l) => l.textContent.trim()).join(" | ")`)
	if want := "DB_PASSWORD ← db/PASSWORD | DB_HOST ← db/HOST no key HOST | db → /var/sless/secrets/db (default) | tls → /run/tls no such secret"; refs != want {
		t.Fatalf("the function's secret references read\n%q, want\n%q", refs, want)
	}
	noMarker("in the function's view", password2, user2)
	p.Screenshot("function-secrets")

	// Deleting a secret in use shows why not; once unused it goes.
	p.Do("back to the secrets", chromedp.Navigate(d.endpoint+"/console/#/secrets"))
	p.Wait("the list", `document.getElementById("secrets").dataset.state === "loaded" && document.querySelector('button[data-delete="db"]')`)
	p.Do("delete db while in use", chromedp.Click(chromedp.CSS(`button[data-delete="db"]`)), chromedp.Click(chromedp.CSS(`button[data-delete="db"]`)))
	p.Wait("the refusal", `document.getElementById("secrets-error").textContent !== ""`)
	if msg := p.Text("#secrets-error"); !strings.Contains(msg, "Could not delete db") || !strings.Contains(msg, "in use by function user") {
		t.Fatalf("deleting a secret in use shows %q; want the server's refusal naming function user", msg)
	}
	p.Screenshot("secret-in-use")
	if err := d.c.DeleteFunction(ctx, d.ns, "user"); err != nil {
		t.Fatal(err)
	}
	p.Do("delete db", chromedp.Click(chromedp.CSS(`button[data-delete="db"]`)), chromedp.Click(chromedp.CSS(`button[data-delete="db"]`)))
	p.Wait("db gone", `document.getElementById("secrets").dataset.state === "loaded" && !document.querySelector('tr[data-secret="db"]') && document.getElementById("secrets-notice").textContent === "Deleted db."`)
	if _, err := d.c.GetSecret(ctx, d.ns, "db"); err == nil {
		t.Fatal("db is still there after the console deleted it")
	}
	noMarker("at the end", password, user, password2, user2)
}
