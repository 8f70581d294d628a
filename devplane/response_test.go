package devplane_test

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/history"
	"sless.dev/sless/test/testkit"
)

// sitePython serves a page, the PNG it shows, and a redirect to the page, from one handler.
const sitePython = `import base64

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4DwABAQEAGN2NtAAAAABJRU5ErkJggg==")

def handle(event, request):
    path = request["path"]
    if path == "/logo.png":
        return {"statusCode": 200, "headers": {"Content-Type": "image/png", "Cache-Control": "max-age=60"},
                "body": base64.b64encode(PNG).decode(), "isBase64Encoded": True}
    if path == "/old":
        return {"statusCode": 301, "headers": {"Location": "page"}}
    return {"statusCode": 200, "headers": {"Content-Type": "text/html; charset=utf-8", "Set-Cookie": "seen=1"},
            "body": "<!doctype html><title>site</title><img src=logo.png>"}
`

// webhookNode answers a webhook the way providers expect: 202 with a JSON body and a header.
const webhookNode = `exports.handle = async (event, request) => ({
  statusCode: 202,
  headers: { "X-Delivery": request.headers["x-delivery"] || "none" },
  body: { accepted: event.id, raw: request.body.length },
});
`

// TestResponseObjectsThroughTheGateway: a page, an image and a redirect from a Python
// function and a webhook answer from a Node one arrive through sless dev's gateway as the
// handlers shaped them — status, headers, bytes — with the shared origin's sandbox added and
// the cookie held back.
func TestResponseObjectsThroughTheGateway(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{})
	if fn := d.deploy("site", "python3.11", map[string]string{"handler.py": sitePython}, api.FunctionFields{}); !fn.Status.Ready {
		t.Fatalf("site: %s", fn.Status.Message)
	}
	if fn := d.deploy("hook", "nodejs20", map[string]string{"handler.js": webhookNode}, api.FunctionFields{}); !fn.Status.Ready {
		t.Fatalf("hook: %s", fn.Status.Message)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(method, path, body string, h ...string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, d.endpoint+"/fn/"+d.ns+path, strings.NewReader(body))
		for i := 0; i+1 < len(h); i += 2 {
			req.Header.Set(h[i], h[i+1])
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp, out
	}

	resp, page := get("GET", "/site/page", "")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" || !strings.Contains(string(page), "<img src=logo.png>") {
		t.Errorf("page: %d %s %q", resp.StatusCode, resp.Header.Get("Content-Type"), page)
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Security-Policy"), "sandbox") || resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("page on the shared origin: CSP %q, Set-Cookie %q", resp.Header.Get("Content-Security-Policy"), resp.Header.Get("Set-Cookie"))
	}
	png, _ := base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4DwABAQEAGN2NtAAAAABJRU5ErkJggg==")
	resp, img := get("GET", "/site/logo.png", "")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "image/png" || resp.Header.Get("Cache-Control") != "max-age=60" || !bytes.Equal(img, png) {
		t.Errorf("image: %d %s %s, %d bytes (want the %d of the PNG)", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Cache-Control"), len(img), len(png))
	}
	if resp, _ := get("GET", "/site/old", ""); resp.StatusCode != 301 || resp.Header.Get("Location") != "page" {
		t.Errorf("redirect: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, out := get("POST", "/hook", `{"id":"evt_1"}`, "X-Delivery", "d-9", "Content-Type", "application/json")
	if resp.StatusCode != 202 || resp.Header.Get("X-Delivery") != "d-9" || resp.Header.Get("Content-Type") != "application/json" || string(out) != `{"accepted":"evt_1","raw":14}` {
		t.Errorf("webhook: %d %v %s", resp.StatusCode, resp.Header, out)
	}
	// The history counts a handler's own status like any other.
	testkit.WaitFor(t, "the webhook's record", 10*time.Second, func() bool {
		for _, inv := range d.invocations("hook") {
			if inv.HTTPStatus == 202 && inv.Status == history.StatusSucceeded {
				return true
			}
		}
		return false
	})
}
