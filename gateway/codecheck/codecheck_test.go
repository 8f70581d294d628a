package codecheck

import (
	"strings"
	"testing"
)

func TestParseVerdict(t *testing.T) {
	cases := []struct {
		content string
		want    Verdict
		ok      bool
	}{
		{`{"safe": true, "reason": "fine"}`, Verdict{Safe: true, Reason: "fine"}, true},
		{"```json\n{\"safe\": false, \"reason\": \"miner\"}\n```", Verdict{Safe: false, Reason: "miner"}, true},
		{`{"safe": false}`, Verdict{Safe: false, Reason: "no reason given"}, true},
		{`{"reason": "no verdict"}`, Verdict{}, false},
		{`I think it is safe`, Verdict{}, false},
	}
	for _, tc := range cases {
		got, err := parseVerdict(tc.content)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("parseVerdict(%q) = %+v, %v", tc.content, got, err)
		}
	}
}

// FuzzParseVerdict: whatever a model answers, parseVerdict returns a verdict or an error, and
// an unsafe verdict always carries a reason.
func FuzzParseVerdict(f *testing.F) {
	f.Add(`{"safe": true, "reason": "fine"}`)
	f.Add("```json\n{\"safe\": false}\n```")
	f.Add(`{"safe": null}`)
	f.Fuzz(func(t *testing.T, content string) {
		v, err := parseVerdict(content)
		if err != nil {
			if v != (Verdict{}) || !strings.Contains(err.Error(), "verdict") {
				t.Fatalf("parseVerdict(%q) = %+v with error %v", content, v, err)
			}
			return
		}
		if !v.Safe && v.Reason == "" {
			t.Fatalf("parseVerdict(%q): unsafe without a reason", content)
		}
	})
}
