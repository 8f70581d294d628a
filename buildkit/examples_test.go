package buildkit

import (
	"encoding/json"
	"testing"
)

// TestExamples builds and runs every example function the documentation points to.
func TestExamples(t *testing.T) {
	for _, tc := range []struct{ dir, runtime string }{
		{"../examples/hello-go", "go1.23"},
		{"../examples/hello-python", "python3.11"},
		{"../examples/hello-node", "nodejs20"},
	} {
		t.Run(tc.runtime, func(t *testing.T) {
			art := buildHandler(t, tc.dir, tc.runtime, "")
			var out struct{ Message string }
			if raw := runJob(t, art, `{"name":"sless"}`); json.Unmarshal([]byte(raw), &out) != nil || out.Message != "hello, sless" {
				t.Errorf("job output = %s", raw)
			}
			fn := startFunction(t, art)
			r := fn.call(t, "POST", "/", []byte(`{"name":"http"}`))
			if got := r.json(t); r.status != 200 || got["message"] != "hello, http" || got["method"] != "POST" {
				t.Errorf("HTTP = %d %s", r.status, r.body)
			}
		})
	}
}
