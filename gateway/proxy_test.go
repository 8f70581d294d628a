package gateway

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestCanHandOff: a connection is handed to the function only at a clean request boundary
// of plain HTTP/1.1 keep-alive, and never for a route whose token only the gateway checks.
func TestCanHandOff(t *testing.T) {
	readBody := func() *eofBody {
		b := &eofBody{ReadCloser: http.NoBody}
		b.eof.Store(true)
		return b
	}
	cases := []struct {
		name    string
		mutate  func(r *http.Request)
		body    *eofBody
		status  int
		header  map[string]string
		route   Route
		handOff bool
	}{
		{name: "keep-alive with Content-Length", status: 200, header: map[string]string{"Content-Length": "2"}, handOff: true},
		{name: "body read to the end", body: readBody(), status: 200, header: map[string]string{"Content-Length": "2"}, handOff: true},
		{name: "body not read to the end", body: &eofBody{ReadCloser: http.NoBody}, status: 413, header: map[string]string{"Content-Length": "2"}},
		{name: "204 needs no length", status: 204, handOff: true},
		{name: "streamed response", status: 200},
		{name: "no response written", status: 0},
		{name: "auth required", status: 200, header: map[string]string{"Content-Length": "2"}, route: Route{RequireAuth: true}},
		{name: "client asked to close", mutate: func(r *http.Request) { r.Close = true }, status: 200, header: map[string]string{"Content-Length": "2"}},
		{name: "HTTP/1.0", mutate: func(r *http.Request) { r.ProtoMinor = 0 }, status: 200, header: map[string]string{"Content-Length": "2"}},
		{name: "HTTP/2", mutate: func(r *http.Request) { r.ProtoMajor, r.ProtoMinor = 2, 0 }, status: 200, header: map[string]string{"Content-Length": "2"}},
		{name: "TLS", mutate: func(r *http.Request) { r.TLS = &tls.ConnectionState{} }, status: 200, header: map[string]string{"Content-Length": "2"}},
		{name: "upgrade", mutate: func(r *http.Request) { r.Header.Set("Upgrade", "websocket") }, status: 101},
		{name: "expect", mutate: func(r *http.Request) { r.Header.Set("Expect", "100-continue") }, status: 200, header: map[string]string{"Content-Length": "2"}},
		{name: "a process proxying back", mutate: func(r *http.Request) { r.Header.Set("X-Sless-No-Handoff", "1") }, status: 200, header: map[string]string{"Content-Length": "2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/fn/ns/fn", strings.NewReader("{}"))
			if tc.mutate != nil {
				tc.mutate(r)
			}
			sw := &statusWriter{ResponseWriter: httptest.NewRecorder(), status: tc.status}
			for k, v := range tc.header {
				sw.Header().Set(k, v)
			}
			if got := canHandOff(r, tc.body, sw, tc.route); got != tc.handOff {
				t.Fatalf("canHandOff = %v, want %v", got, tc.handOff)
			}
		})
	}
}
