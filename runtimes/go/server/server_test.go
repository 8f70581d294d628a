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

// FuzzResponseOf: any handler result either is a plain result, a valid response (status in
// range, no header a handler may not set, no CR/LF in a value) or a clear error.
func FuzzResponseOf(f *testing.F) {
	for _, seed := range []string{`{"statusCode":201,"headers":{"A":"b"},"body":"x"}`, `{"statusCode":200,"isBase64Encoded":true,"body":"AAE="}`,
		`{"statusCode":"200"}`, `{"statusCode":99}`, `{"statusCode":204,"multiValueHeaders":{"Set-Cookie":["a","b"]}}`, `{"statusCode":200,"headers":{"Connection":"close"}}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		resp, isResponse, err := responseOf(out)
		if !isResponse || err != nil {
			return
		}
		if resp.status < 100 || resp.status > 599 {
			t.Fatalf("status %d accepted", resp.status)
		}
		for name, values := range resp.header {
			if droppedHeader(name) || !validHeaderName(name) {
				t.Fatalf("header %q kept", name)
			}
			for _, v := range values {
				if strings.ContainsAny(v, "\r\n\x00") {
					t.Fatalf("header %s value %q kept", name, v)
				}
			}
		}
	})
}
