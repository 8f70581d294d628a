package dispatcher

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxHeaderValueLen bounds each header value the function receives (CleanValue).
const MaxHeaderValueLen = 4096

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

// NewEventHeader starts the header of an event's call: Content-Type, X-Sless-Trigger-Kind
// event, X-Sless-Queue, X-Sless-Attempt and X-Sless-Trigger, with room for extra more values
// the source adds (its own metadata), and for traceparent.
func NewEventHeader(queue, trigger string, attempt, extra int) HeaderBuilder {
	// One map sized for every header and one array behind all the values, instead of a
	// slice per value: this runs for every message.
	n := 5 + extra // Content-Type, X-Sless-Trigger-Kind, -Queue and -Attempt; traceparent
	if trigger != "" {
		n++
	}
	b := HeaderBuilder{H: make(http.Header, n), vals: make([]string, 0, n)}
	b.Set("Content-Type", "application/json")
	b.Set("X-Sless-Trigger-Kind", "event")
	b.Set("X-Sless-Queue", queue)
	b.Set("X-Sless-Attempt", strconv.Itoa(attempt))
	b.SetIf("X-Sless-Trigger", trigger)
	return b
}

// HeaderBuilder fills H, an http.Header whose keys are already canonical, each value a
// one-element window of vals (capacity 1, so an Add to it reallocates rather than
// overwriting the next value).
type HeaderBuilder struct {
	H    http.Header
	vals []string
}

// Set sets the canonical key k to v.
func (b *HeaderBuilder) Set(k, v string) {
	b.vals = append(b.vals, v)
	n := len(b.vals)
	b.H[k] = b.vals[n-1 : n : n]
}

// SetIf sets the canonical key k to v made a valid value (CleanValue), unless v is empty.
func (b *HeaderBuilder) SetIf(k, v string) {
	if v != "" {
		b.Set(k, CleanValue(v))
	}
}

// CleanValue makes s a valid HTTP header value: UTF-8, no control characters, bounded.
func CleanValue(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\t' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > MaxHeaderValueLen {
		cut := MaxHeaderValueLen
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}
