package gateway

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"sless.dev/sless/gateway/api"
)

func TestDecodeJSON(t *testing.T) {
	cases := []struct {
		name, body string
		code       int
		field      string
	}{
		{"valid", `{"name":"a","runtime":"go1.23","timeout_sec":0}`, 0, ""},
		{"null means not sent", `{"name":"a","timeout_sec":null}`, 0, ""},
		{"unknown field", `{"name":"a","colour":"red"}`, 400, "colour"},
		{"wrong type", `{"name":"a","memory_mb":"x"}`, 400, "memory_mb"},
		{"wrong map value", `{"name":"a","env_vars":{"A":1}}`, 400, "env_vars"},
		{"array body", `[1]`, 400, ""},
		{"syntax", `{"name":}`, 400, ""},
		{"cut short", `{"name":"a"`, 400, ""},
		{"empty", ``, 400, ""},
		{"trailing", `{} {}`, 400, ""},
		{"int overflow", `{"memory_mb": 99999999999}`, 400, "memory_mb"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var v api.CreateFunction
			err := decodeJSON(strings.NewReader(tc.body), &v)
			if tc.code == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var he *httpError
			if !errors.As(err, &he) || he.Code != tc.code || he.Field != tc.field || he.Msg == "" {
				t.Fatalf("error %#v, want %d on field %q", err, tc.code, tc.field)
			}
		})
	}
	var v api.CreateFunction
	var he *httpError
	body := http.MaxBytesReader(nil, io.NopCloser(strings.NewReader(`{"name":"`+strings.Repeat("a", 100)+`"}`)), 10)
	if err := decodeJSON(body, &v); !errors.As(err, &he) || he.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized body: %v, want 413", err)
	}
}

// checkDecoded asserts the invariant every decoder path keeps: a typed 4xx error or a value
// whose validation gives a typed error or nothing, never a panic or an untyped error.
func checkDecoded(t *testing.T, err error, validate func() error) {
	if err != nil {
		var he *httpError
		if !errors.As(err, &he) || he.Code < 400 || he.Code > 499 {
			t.Fatalf("decode error %v is not a 4xx httpError", err)
		}
		return
	}
	if err := validate(); err != nil {
		if code, _ := statusOf(err); code != http.StatusBadRequest {
			t.Fatalf("validation error %v is not a 400", err)
		}
	}
}

func FuzzDecodeFunction(f *testing.F) {
	for _, s := range []string{`{"name":"a","runtime":"go1.23"}`, `{"name":"a","runtime":"python3.11","env_vars":{"A":"b"},"timeout_sec":900}`,
		`{"min_replicas":3,"max_replicas":1}`, `{"runtime":null}`, `{"env_vars":{"SLESS_X":"1"}}`, `{`, `[]`, `{"a":1}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var req api.CreateFunction
		err := decodeJSON(strings.NewReader(body), &req)
		checkDecoded(t, err, func() error {
			spec := defaultFunctionSpec()
			applyFunctionFields(&spec, req.FunctionFields)
			if err := validName("name", req.Name); err != nil {
				return err
			}
			return validateFunctionSpec(spec)
		})
	})
}

func FuzzDecodeTrigger(f *testing.F) {
	for _, s := range []string{`{"name":"t","type":"cron","function":"f","schedule":"*/5 * * * *","timezone":"Europe/Berlin"}`,
		`{"type":"event","function":"f","queue":"q","broker_secret":"s"}`, `{"enabled":false}`, `{"type":"http","require_auth":true}`,
		`{"type":"cron","schedule":"@every 1h"}`, `{"type":"cron","schedule":"TZ=UTC 0 * * * *"}`, `{"timezone":"../../etc/passwd"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var req api.CreateTrigger
		err := decodeJSON(strings.NewReader(body), &req)
		checkDecoded(t, err, func() error {
			typ := api.TriggerHTTP
			if req.Type != nil {
				typ = *req.Type
			}
			spec := defaultTriggerSpec(typ)
			if err := applyTriggerFields(&spec, req.TriggerFields); err != nil {
				return err
			}
			return validateTriggerSpec(spec)
		})
	})
}

func FuzzDecodeJob(f *testing.F) {
	for _, s := range []string{`{"name":"j","function":"f","event":{"a":[1,2]},"run_id":3}`, `{"runtime":"nodejs22","image":"x"}`, `{"event":"str"}`, `{"run_id":-5}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var req api.CreateJob
		err := decodeJSON(strings.NewReader(body), &req)
		checkDecoded(t, err, func() error {
			var spec api.JobSpec
			applyJobFields(&spec, req.JobFields)
			return validateJobSpec(spec)
		})
	})
}

// FuzzSplitFnPath checks the /fn/ path parser only accepts valid names and keeps the rest
// rooted.
func FuzzSplitFnPath(f *testing.F) {
	for _, s := range []string{"/fn/ns/name", "/fn/ns/name/a/b%2Fc", "/fn/ns/", "/fn//x", "/fn/NS/x", "/fn/a/b/../../c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		ns, name, rest, ok := splitFnPath(p)
		if !ok {
			return
		}
		if validName("", ns) != nil || validName("", name) != nil || !strings.HasPrefix(rest, "/") {
			t.Fatalf("splitFnPath(%q) = %q %q %q", p, ns, name, rest)
		}
	})
}
