package dispatcher

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestEventBody(t *testing.T) {
	cases := map[string]struct {
		contentType, body string
		want              string // "" = poison
		limit             int    // 0 = 100
	}{
		"object unchanged":          {"application/json", `{"a":1}`, `{"a":1}`, 0},
		"object without type":       {"", ` {"a":[1,2]}`, ` {"a":[1,2]}`, 0},
		"array wrapped":             {"", `[1,2]`, `{"body":[1,2]}`, 0},
		"json string wrapped":       {"application/json", `"hi"`, `{"body":"hi"}`, 0},
		"number wrapped":            {"", `42`, `{"body":42}`, 0},
		"text wrapped":              {"text/plain", "hello \"world\"", `{"body":"hello \"world\""}`, 0},
		"empty text":                {"", "", `{}`, 0},
		"blank text":                {"text/plain", " \n", `{}`, 0},
		"empty, declared JSON":      {"application/json", "", "", 0},
		"invalid json declared":     {"application/json", `{"a":`, "", 0},
		"invalid +json declared":    {"application/cloudevents+json", `nope`, "", 0},
		"binary":                    {"application/octet-stream", "\xff\xfe", "", 0},
		"oversize":                  {"", strings.Repeat("a", 11), "", 10},
		"bad content type is text":  {"???", `abc`, `{"body":"abc"}`, 0},
		"exactly at the size limit": {"", strings.Repeat("a", 10), `{"body":"aaaaaaaaaa"}`, 10},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if tc.limit == 0 {
				tc.limit = 100
			}
			got, err := EventBody(tc.contentType, []byte(tc.body), tc.limit)
			if tc.want == "" {
				var pe *PoisonError
				if !errors.As(err, &pe) {
					t.Fatalf("got %s, %v; want a PoisonError", got, err)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("got %s, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func TestRetryDelay(t *testing.T) {
	p := RetryPolicy{Backoff: time.Second, MaxBackoff: 5 * time.Second}
	for attempt, want := range map[int]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 5 * time.Second, 1000: 5 * time.Second} {
		if got := p.delay(attempt); got != want {
			t.Errorf("delay(%d) = %s, want %s", attempt, got, want)
		}
	}
}

func TestParseFunctionRef(t *testing.T) {
	for s, ok := range map[string]bool{"ns/fn": true, "ns": false, "/fn": false, "ns/": false, "a/b/c": false, "": false} {
		_, err := ParseFunctionRef(s)
		var ce *ConfigError
		if (err == nil) != ok || err != nil && !errors.As(err, &ce) {
			t.Errorf("ParseFunctionRef(%q) err = %v", s, err)
		}
	}
}

func FuzzEventBody(f *testing.F) {
	f.Add("application/json", []byte(`{"a":1}`))
	f.Add("", []byte(`[1]`))
	f.Add("text/plain", []byte("hi"))
	f.Add("application/x+json", []byte("\xff"))
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		out, err := EventBody(contentType, body, 1<<10)
		if err != nil {
			var pe *PoisonError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a PoisonError", err)
			}
			return
		}
		var obj map[string]any
		if json.Unmarshal(out, &obj) != nil {
			t.Fatalf("event %q is not a JSON object", out)
		}
	})
}
