package main

import (
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/rules"
	"sless.dev/sless/rules/rulestest"
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

// TestIdentityVectors runs rules/rulestest/identity.json through the Go wrapper's verifier
// (the Python and Node ones run it in runtimes/identity_test.go).
func TestIdentityVectors(t *testing.T) {
	id := rulestest.IdentityTable(t)
	for _, c := range id.Cases {
		t.Run(c.Name, func(t *testing.T) {
			var key []byte
			keyOK := true
			if raw, named := id.Keys[c.Key]; named {
				k, err := hex.DecodeString(raw)
				key, keyOK = k, err == nil && len(k) == 32
				if !keyOK {
					key = []byte{}
				}
			}
			h := http.Header{}
			for _, kv := range c.Headers {
				h.Add(kv[0], kv[1])
			}
			got := "ok"
			if ref := verifyIdentity(key, keyOK, c.Method, c.Path, h, time.Unix(id.Now, 0)); ref != nil {
				got = ref.reason
				if want := map[string]int{"badkey": 500}[ref.reason]; ref.status != max(want, 401) {
					t.Errorf("status %d for %s", ref.status, ref.reason)
				}
			}
			if got != c.Want {
				t.Errorf("verifier says %s, want %s", got, c.Want)
			}
		})
	}
}

// FuzzVerifyIdentity: whatever a caller sends as the signature, the platform headers, the
// method or the path, the wrapper lets a call through exactly when it carries the signature
// the platform's signer (rules.Signature) makes for it within the window, and never panics.
func FuzzVerifyIdentity(f *testing.F) {
	key := rules.FunctionKey([]byte("master"), "team-a", "resize")
	now := int64(1767225600)
	h := http.Header{"X-Sless-Subject": {"alice"}}
	f.Add("POST", "/orders?x=1", "alice", rules.Signature(key, now, "POST", "/orders", h), int64(0))
	f.Add("GET", "/", "", rules.Signature(key, now-900, "GET", "/", http.Header{}), int64(0))
	f.Add("GET", "/", "bob", "t=1767225600,v1="+strings.Repeat("0", 64), int64(5))
	f.Add("GET", "/a%20b", "x", "t=1767225600,v1=", int64(-301))
	f.Fuzz(func(t *testing.T, method, target, subject, sig string, skew int64) {
		h := http.Header{}
		if subject != "" {
			h.Set("X-Sless-Subject", subject)
		}
		h.Set(signatureHeader, sig)
		at := time.Unix(now+skew, 0)
		ref := verifyIdentity(key, true, method, target, h, at)
		path, _, _ := strings.Cut(target, "?")
		m := signaturePattern.FindStringSubmatch(sig)
		valid := false
		if m != nil {
			ts, _ := strconv.ParseInt(m[1], 10, 64)
			signed := http.Header{}
			if subject != "" {
				signed.Set("X-Sless-Subject", subject)
			}
			age := at.Unix() - ts
			valid = age >= -signatureAhead && age <= signatureBehind && rules.Signature(key, ts, method, path, signed) == "t="+strconv.FormatInt(ts, 10)+",v1="+m[2]
		}
		if (ref == nil) != valid {
			t.Fatalf("verifier let through %t, signer's signature matches %t (ref %+v)", ref == nil, valid, ref)
		}
	})
}

// TestIdentityKeyLeavesEnvironment: the wrapper reads its key and takes it out of the
// environment the handler (and whatever it starts) sees; a key that is not 64 hex digits
// refuses every call rather than let them through unverified.
func TestIdentityKeyLeavesEnvironment(t *testing.T) {
	t.Setenv(identityKeyEnv, strings.Repeat("ab", 32))
	key, ok := loadIdentityKey()
	if _, still := os.LookupEnv(identityKeyEnv); still || !ok || len(key) != 32 {
		t.Errorf("key %x ok %t, still in the environment %t", key, ok, still)
	}
	t.Setenv(identityKeyEnv, "not hex")
	if key, ok := loadIdentityKey(); ok || key == nil {
		t.Errorf("a bad key was taken: %x %t", key, ok)
	}
}
