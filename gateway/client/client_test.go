package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"sless.dev/sless/gateway/api"
)

func TestNewRejectsBadEndpoints(t *testing.T) {
	for _, e := range []string{"", "sless.example.com", "ftp://x", "http://"} {
		if _, err := New(e, "", nil); err == nil {
			t.Errorf("New(%q) accepted", e)
		}
	}
}

// serve starts a server of handler and returns a client of it, with endpoint path basePath
// and token "tok".
func serve(t *testing.T, basePath string, handler http.HandlerFunc) *Client {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	c, err := New(srv.URL+basePath, "tok", nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestErrors checks that API errors keep status, message and field, and that non-JSON error
// bodies (a proxy in front of the gateway) still give a useful message.
func TestErrors(t *testing.T) {
	c := serve(t, "/base/", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "no token", 500)
			return
		}
		switch {
		case strings.HasSuffix(r.URL.Path, "/functions/missing"):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(404)
			_, _ = w.Write([]byte(`{"error":"function \"missing\" not found"}`))
		case r.URL.Path == "/base/v1/namespaces/ns/functions" && r.Method == http.MethodPost:
			w.WriteHeader(400)
			_, _ = w.Write([]byte(`{"error":"bad","field":"runtime"}`))
		default:
			w.WriteHeader(502)
			_, _ = w.Write([]byte("<html>bad gateway</html>"))
		}
	})
	ctx := context.Background()
	if _, err := c.GetFunction(ctx, "ns", "missing"); !IsNotFound(err) || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("404: %v", err)
	}
	_, err := c.CreateFunction(ctx, "ns", api.CreateFunction{Name: "f"})
	if e, ok := err.(*Error); !ok || e.StatusCode != 400 || e.Field != "runtime" {
		t.Fatalf("400: %#v", err)
	}
	if _, err := c.ListTriggers(ctx, "ns"); err == nil || !strings.Contains(err.Error(), "502") || !strings.Contains(err.Error(), "bad gateway") {
		t.Fatalf("502: %v", err)
	}
}
