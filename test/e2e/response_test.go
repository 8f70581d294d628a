//go:build e2e

package e2e

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"sless.dev/sless/gateway/api"
)

// logoPNG is a 1×1 PNG, base64.
const logoPNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4DwABAQEAGN2NtAAAAABJRU5ErkJggg=="

// siteNode serves an HTML page and the PNG it shows from one Node.js handler.
const siteNode = `const PNG = "` + logoPNG + `";
exports.handle = async (event, request) => {
  if (request.path === "/logo.png") {
    return { statusCode: 200, headers: { "Content-Type": "image/png" }, body: PNG, isBase64Encoded: true };
  }
  if (request.method === "DELETE") return { statusCode: 204 };
  return { statusCode: 200, headers: { "Content-Type": "text/html; charset=utf-8", "X-Page": request.path },
    body: "<!doctype html><title>site</title><img src=logo.png>" };
};
`

// TestHTMLPageAndImage is the response-control journey on the cluster: a Node.js function
// built by kaniko serves an HTML page and a PNG through gateway → interceptor → pod, status,
// headers and bytes as the handler shaped them, the page sandboxed on the shared origin.
func TestHTMLPageAndImage(t *testing.T) {
	t.Parallel()
	tn := newTenant(t)
	deployFunction(t, tn, "site", api.FunctionFields{Runtime: ptr.To("nodejs20"), TimeoutSec: ptr.To(int32(30)),
		MinReplicas: ptr.To(int32(0)), MaxReplicas: ptr.To(int32(1))}, map[string]string{"handler.js": siteNode})
	fetch := func(method, path string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, g.gatewayURL+"/fn/"+tn.ns+"/site"+path, nil)
		resp, err := (&http.Client{Timeout: 3 * time.Minute}).Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	resp, page := fetch("GET", "/index.html")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" || resp.Header.Get("X-Page") != "/index.html" ||
		!strings.Contains(string(page), "<img src=logo.png>") {
		t.Fatalf("page: %d %v %q", resp.StatusCode, resp.Header, page)
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Security-Policy"), "sandbox") {
		t.Errorf("page on the shared origin without the sandbox: %q", resp.Header.Get("Content-Security-Policy"))
	}
	want, _ := base64.StdEncoding.DecodeString(logoPNG)
	resp, img := fetch("GET", "/logo.png")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "image/png" || !bytes.Equal(img, want) {
		t.Errorf("image: %d %s, %d bytes, want the %d of the PNG", resp.StatusCode, resp.Header.Get("Content-Type"), len(img), len(want))
	}
	if resp, body := fetch("DELETE", "/x"); resp.StatusCode != 204 || len(body) != 0 {
		t.Errorf("204: %d %q", resp.StatusCode, body)
	}
}
