package amqpsource

import (
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"sless.dev/sless/dispatcher"
)

func TestInvocationHeader(t *testing.T) {
	d := &amqp.Delivery{
		Exchange: "ex", RoutingKey: "orders.created", ContentType: "text/plain", MessageId: "m1",
		CorrelationId: "c1", Priority: 5, Timestamp: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Redelivered: true,
		Headers: amqp.Table{
			"tenant_id": int32(7), "x-sless-attempt": int32(2), "traceparent": "00-x", "nested": amqp.Table{"a": "b"},
			"evil\r\nname": "line1\r\nInjected: yes", "flag": true,
		},
	}
	h := InvocationHeader(d, "orders", "on-order", 2)
	want := map[string]string{
		"Content-Type": "application/json", "X-Sless-Trigger-Kind": "event", "X-Sless-Queue": "orders",
		"X-Sless-Attempt": "2", "X-Sless-Trigger": "on-order", "X-Amqp-Exchange": "ex", "X-Amqp-Routing-Key": "orders.created",
		"X-Amqp-Content-Type": "text/plain", "X-Amqp-Message-Id": "m1", "X-Amqp-Correlation-Id": "c1", "X-Amqp-Priority": "5",
		"X-Amqp-Timestamp": "2026-01-02T03:04:05Z", "X-Amqp-Redelivered": "true", "X-Amqp-Header-Tenant-Id": "7",
		"X-Amqp-Header-Nested": `{"a":"b"}`, "X-Amqp-Header-Evil--Name": "line1  Injected: yes", "X-Amqp-Header-Flag": "true",
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	for _, k := range []string{"X-Amqp-Header-X-Sless-Attempt", "X-Amqp-Header-Traceparent", "X-Amqp-User-Id"} {
		if h.Get(k) != "" {
			t.Errorf("%s must not be set", k)
		}
	}
}

func TestAttemptOf(t *testing.T) {
	for v, want := range map[any]int{nil: 1, int32(3): 3, int64(2): 2, "4": 4, "x": 1, int32(-5): 1, int64(1 << 40): 1, uint8(9): 9} {
		if got := attemptOf(amqp.Table{headerAttempt: v}); got != want {
			t.Errorf("attemptOf(%#v) = %d, want %d", v, got, want)
		}
	}
}

func TestParseQueueArg(t *testing.T) {
	for s, want := range map[string]any{"x-max-length=10": int64(10), "x-queue-type=quorum": "quorum", "x-single-active-consumer=true": true, "k=": "", "k=1.5": "1.5", "k=True": "True"} {
		_, v, err := ParseQueueArg(s)
		if err != nil || v != want {
			t.Errorf("ParseQueueArg(%q) = %#v, %v; want %#v", s, v, err, want)
		}
	}
	if _, _, err := ParseQueueArg("novalue"); err == nil {
		t.Error("ParseQueueArg without = accepted")
	}
}

func FuzzInvocationHeader(f *testing.F) {
	f.Add("tenant_id", "7", "m1")
	f.Add("a\r\nb", "v\x00\n", "\xff")
	f.Fuzz(func(t *testing.T, key, value, id string) {
		d := &amqp.Delivery{MessageId: id, Headers: amqp.Table{key: value}}
		for k, vs := range InvocationHeader(d, "q", "t", 1) {
			if !validHeaderName(k) {
				t.Fatalf("invalid header name %q", k)
			}
			for _, v := range vs {
				if !utf8.ValidString(v) || strings.ContainsAny(v, "\r\n\x00") || len(v) > dispatcher.MaxHeaderValueLen {
					t.Fatalf("invalid header value %q", v)
				}
			}
		}
		// The header must be sendable: net/http rejects invalid names and values.
		req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/", nil)
		req.Header = InvocationHeader(d, "q", "t", 1)
		if err := req.Write(discardWriter{}); err != nil {
			t.Fatalf("request with mapped headers not writable: %v", err)
		}
	})
}

func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for _, c := range []byte(k) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

type discardWriter struct{}

func (discardWriter) Write(p []byte) (int, error) { return len(p), nil }
