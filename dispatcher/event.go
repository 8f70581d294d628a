package dispatcher

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Headers the dispatcher keeps on messages it republishes; they never reach the function as
// application headers.
const (
	headerAttempt     = "x-sless-attempt"    // attempt number of the next delivery (1-based)
	headerRetryAt     = "x-sless-retry-at"   // unix milliseconds before which it must not run
	headerLastError   = "x-sless-last-error" // error of the previous attempt
	headerDeadReason  = "x-sless-dead-letter-reason"
	headerSourceQueue = "x-sless-source-queue"
	headerDeadAt      = "x-sless-dead-lettered-at"
	maxHeaderValueLen = 4096
)

// PoisonError marks a message that no attempt can deliver (oversize, unparseable); it goes to
// the dead-letter queue at once with Reason.
type PoisonError struct{ Reason string }

func (e *PoisonError) Error() string { return "poison message: " + e.Reason }

// EventBody is the JSON event posted to the function for a message body, the event the
// wrappers make of the same body sent over HTTP (runtimes/README.md, "Event"):
//   - a JSON object is passed unchanged; an empty body is {};
//   - any other JSON value (array, string, number, …) becomes {"body": <value>};
//   - other UTF-8 text becomes {"body": "<text>"};
//   - a body over maxBytes, a body not valid JSON while the content type says JSON, and
//     binary data (neither JSON nor UTF-8) are poison.
func EventBody(contentType string, body []byte, maxBytes int) ([]byte, error) {
	if len(body) > maxBytes {
		return nil, &PoisonError{Reason: fmt.Sprintf("body is %d bytes, over the limit of %d (--max-body-bytes)", len(body), maxBytes)}
	}
	if len(bytes.TrimSpace(body)) == 0 && !isJSONType(contentType) {
		return []byte("{}"), nil
	}
	if json.Valid(body) {
		if isJSONObject(body) {
			return body, nil
		}
		return json.Marshal(map[string]json.RawMessage{"body": body})
	}
	if isJSONType(contentType) {
		return nil, &PoisonError{Reason: fmt.Sprintf("content type %q declares JSON but the body is not valid JSON", contentType)}
	}
	if !utf8.Valid(body) {
		return nil, &PoisonError{Reason: "body is neither JSON nor UTF-8 text; encode binary payloads (e.g. base64 in a JSON field)"}
	}
	return json.Marshal(map[string]string{"body": string(body)})
}

func isJSONObject(b []byte) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c == '{'
	}
	return false
}

func isJSONType(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// InvocationHeader maps an AMQP delivery onto the HTTP headers the function receives:
// properties become X-Amqp-<Property>, application headers X-Amqp-Header-<Name> (name
// characters outside [A-Za-z0-9-] become '-'), plus X-Sless-* invocation metadata.
// traceparent/tracestate are handled by the tracing code, not copied here.
func InvocationHeader(d *amqp.Delivery, queue, trigger string, attempt int) http.Header {
	// One map sized for every header and one array behind all the values, instead of a
	// slice per value: this runs for every message. Room is left for traceparent/tracestate.
	n := 5 + len(d.Headers) // Content-Type, X-Sless-Trigger-Kind, -Queue and -Attempt; traceparent
	for _, set := range [...]bool{trigger != "", d.Exchange != "", d.RoutingKey != "", d.ContentType != "",
		d.ContentEncoding != "", d.MessageId != "", d.CorrelationId != "", d.ReplyTo != "", d.Type != "", d.AppId != "",
		d.UserId != "", d.Expiration != "", d.Priority != 0, !d.Timestamp.IsZero(), d.Redelivered} {
		if set {
			n++
		}
	}
	b := headerBuilder{h: make(http.Header, n), vals: make([]string, 0, n)}
	b.set("Content-Type", "application/json")
	b.set("X-Sless-Trigger-Kind", "event")
	b.set("X-Sless-Queue", queue)
	b.set("X-Sless-Attempt", strconv.Itoa(attempt))
	b.setIf("X-Sless-Trigger", trigger)
	b.setIf("X-Amqp-Exchange", d.Exchange)
	b.setIf("X-Amqp-Routing-Key", d.RoutingKey)
	b.setIf("X-Amqp-Content-Type", d.ContentType)
	b.setIf("X-Amqp-Content-Encoding", d.ContentEncoding)
	b.setIf("X-Amqp-Message-Id", d.MessageId)
	b.setIf("X-Amqp-Correlation-Id", d.CorrelationId)
	b.setIf("X-Amqp-Reply-To", d.ReplyTo)
	b.setIf("X-Amqp-Type", d.Type)
	b.setIf("X-Amqp-App-Id", d.AppId)
	b.setIf("X-Amqp-User-Id", d.UserId)
	b.setIf("X-Amqp-Expiration", d.Expiration)
	if d.Priority != 0 {
		b.set("X-Amqp-Priority", strconv.Itoa(int(d.Priority)))
	}
	if !d.Timestamp.IsZero() {
		b.set("X-Amqp-Timestamp", d.Timestamp.UTC().Format(time.RFC3339))
	}
	if d.Redelivered {
		b.set("X-Amqp-Redelivered", "true")
	}
	for k, v := range d.Headers {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "x-sless-") || lk == "traceparent" || lk == "tracestate" {
			continue
		}
		if name := headerName(k); name != "" {
			b.h.Add("X-Amqp-Header-"+name, headerValue(v))
		}
	}
	return b.h
}

// headerBuilder fills an http.Header whose keys are already canonical, each value a
// one-element window of vals (capacity 1, so an Add to it reallocates rather than
// overwriting the next value).
type headerBuilder struct {
	h    http.Header
	vals []string
}

func (b *headerBuilder) set(k, v string) {
	b.vals = append(b.vals, v)
	n := len(b.vals)
	b.h[k] = b.vals[n-1 : n : n]
}

func (b *headerBuilder) setIf(k, v string) {
	if v != "" {
		b.set(k, cleanValue(v))
	}
}

// headerName turns an AMQP header key into an HTTP token.
func headerName(k string) string {
	b := []byte(k)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			b[i] = '-'
		}
	}
	return textproto.CanonicalMIMEHeaderKey(strings.Trim(string(b), "-"))
}

// headerValue renders an AMQP field value as header text: scalars as text, tables and arrays
// as JSON.
func headerValue(v any) string {
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case []byte:
		s = string(x)
	case time.Time:
		s = x.UTC().Format(time.RFC3339)
	case bool, int8, int16, int32, int64, uint8, uint16, uint32, float32, float64:
		s = fmt.Sprint(x)
	case nil:
		s = ""
	default:
		if j, err := json.Marshal(x); err == nil {
			s = string(j)
		} else {
			s = fmt.Sprint(x)
		}
	}
	return cleanValue(s)
}

// cleanValue makes s a valid HTTP header value: UTF-8, no control characters, bounded.
func cleanValue(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\t' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > maxHeaderValueLen {
		cut := maxHeaderValueLen
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

// attemptOf reads the attempt number a delivery carries; absent or invalid means 1.
func attemptOf(h amqp.Table) int {
	n, ok := intValue(h[headerAttempt])
	if !ok || n < 1 || n > math32 {
		return 1
	}
	return int(n)
}

const math32 = 1<<31 - 1

// retryAtOf reads the earliest time a retried delivery may run (zero if none).
func retryAtOf(h amqp.Table) time.Time {
	n, ok := intValue(h[headerRetryAt])
	if !ok || n <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

func intValue(v any) (int64, bool) {
	switch x := v.(type) {
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	}
	return 0, false
}
