package client

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestInvoke: /fn/<ns>/<name> plus path and query, the token, the caller's headers (its own
// Authorization first), and any status is an answer.
func TestInvoke(t *testing.T) {
	c := serve(t, "", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Seen", strings.Join([]string{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Authorization"), r.Header.Get("X-A"), string(body)}, "|"))
		w.WriteHeader(http.StatusTeapot)
	})
	for _, tc := range []struct {
		in   Invocation
		want string
	}{
		{Invocation{}, "POST|/fn/ns/f||Bearer tok||"},
		{Invocation{Method: "PUT", Path: "orders/7?full=1", Header: http.Header{"X-A": {"b"}}, Body: strings.NewReader("hi")}, "PUT|/fn/ns/f/orders/7|full=1|Bearer tok|b|hi"},
		{Invocation{Header: http.Header{"Authorization": {"Basic x"}}}, "POST|/fn/ns/f||Basic x||"},
	} {
		resp, err := c.Invoke(context.Background(), "ns", "f", tc.in)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("X-Seen"); resp.StatusCode != http.StatusTeapot || got != tc.want {
			t.Errorf("%+v: %d %q, want %q", tc.in, resp.StatusCode, got, tc.want)
		}
	}
}
