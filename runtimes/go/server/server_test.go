package main

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// BenchmarkServeHTTP is the wrapper's own per-request CPU cost, without the network.
func BenchmarkServeHTTP(b *testing.B) {
	handle = func(event, _ map[string]interface{}) interface{} {
		name, _ := event["name"].(string)
		return map[string]interface{}{"message": "hello, " + name}
	}
	for _, timeout := range []time.Duration{0, 30 * time.Second} {
		w := &wrapper{cfg: config{timeout: timeout, maxBody: 6 << 20}, logger: slog.New(slog.NewJSONHandler(io.Discard, nil))}
		b.Run("timeout="+timeout.String(), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				rec := httptest.NewRecorder()
				w.ServeHTTP(rec, httptest.NewRequest("POST", "/bench", strings.NewReader(`{"name":"bench"}`)))
				if rec.Code != 200 {
					b.Fatal(rec.Code, rec.Body.String())
				}
			}
		})
	}
}
