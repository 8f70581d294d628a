package gateway_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"sless.dev/sless/gateway"
	"sless.dev/sless/test/testkit"
)

// TestMetricsNeedTheToken is item 9 of issue 51: /metrics answered anyone, and its series
// name every tenant's namespaces, functions and revisions. It is served only with the
// metrics token (no tenant's token is one), and not at all without one configured.
func TestMetricsNeedTheToken(t *testing.T) {
	const token = "a-metrics-token-of-the-platform"
	tenant := testkit.Token(t, boundKey, "team")
	auth, err := gateway.NewJWTAuth(gateway.JWTConfig{HMACKey: boundKey})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, configured string
		want             map[string]int // Authorization → status
	}{
		{"no token configured", "", map[string]int{
			"": http.StatusNotFound, "Bearer " + tenant: http.StatusNotFound, "Bearer " + token: http.StatusNotFound}},
		{"a token configured", token, map[string]int{
			"": http.StatusUnauthorized, "Bearer " + tenant: http.StatusUnauthorized, "Bearer " + token + "x": http.StatusUnauthorized,
			"Bearer " + token[:len(token)-1]: http.StatusUnauthorized, token: http.StatusUnauthorized, "Basic " + token: http.StatusUnauthorized,
			"Bearer " + token: http.StatusOK, "bearer " + token: http.StatusOK}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := gateway.New(gateway.Config{Backend: boundBackend{}, Auth: auth, MetricsToken: tc.configured,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			hs := httptest.NewServer(srv)
			defer hs.Close()
			// One request counted first, so the served series are there whichever request
			// below comes first.
			if resp, err := http.Get(hs.URL + "/healthz"); err == nil {
				resp.Body.Close()
			}
			for authz, want := range tc.want {
				resp, body := testkit.Get(t, hs.URL+"/metrics", "", testkit.Authorization(authz))
				served := strings.Contains(string(body), "sless_gateway_requests_total")
				if resp.StatusCode != want || served != (want == http.StatusOK) {
					t.Errorf("GET /metrics with %.20q: %d (series served %v), want %d", authz, resp.StatusCode, served, want)
				}
				if want == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
					t.Errorf("a 401 without WWW-Authenticate")
				}
			}
		})
	}
}
