package rules_test

import (
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/rules"
	"sless.dev/sless/rules/rulestest"
)

// TestSignatureVectors: the signer gives every signature identity.json holds for what it
// says was signed (the wrappers verify the same file), and derives its function key.
func TestSignatureVectors(t *testing.T) {
	id := rulestest.IdentityTable(t)
	for _, c := range id.Cases {
		if c.Signed == nil {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			key, err := hex.DecodeString(id.Keys[c.Signed.Key])
			if err != nil {
				t.Fatal(err)
			}
			h := http.Header{}
			for _, kv := range c.Signed.Headers {
				h.Add(kv[0], kv[1])
			}
			want := ""
			for _, kv := range c.Headers {
				if strings.EqualFold(kv[0], rules.HeaderSignature) {
					want = kv[1]
					break
				}
			}
			if got := rules.Signature(key, c.Signed.T, c.Signed.Method, c.Signed.Path, h); got != want {
				t.Errorf("Signature = %s, want %s (signed string %q)", got, want, rules.SignedString(c.Signed.T, c.Signed.Method, c.Signed.Path, h))
			}
		})
	}
	d := id.Derivation
	master, _ := hex.DecodeString(d.Master)
	if got := hex.EncodeToString(rules.FunctionKey(master, d.Namespace, d.Function)); got != d.Key {
		t.Errorf("FunctionKey = %s, want %s", got, d.Key)
	}
}

// TestSignRequest: a request is signed over what goes on the wire — its method, the path as
// escaped in the request line (not the decoded one), every X-Sless-* header set so far —
// and nothing a proxy adds after (other headers, the query) counts.
func TestSignRequest(t *testing.T) {
	key := rules.FunctionKey([]byte("master"), "team-a", "resize")
	now := time.Unix(1767225600, 0)
	r := httptest.NewRequest(http.MethodPost, "http://resize.team-a.fn.sless.local/a%20b/x%2Fy?size=2", nil)
	r.Header.Set("X-Sless-Subject", "alice")
	r.Header.Set("X-Sless-Signature", "t=1,v1=forged") // replaced, never signed over
	rules.SignRequest(r, key, now)
	h := http.Header{"X-Sless-Subject": {"alice"}}
	if want := rules.Signature(key, now.Unix(), "POST", "/a%20b/x%2Fy", h); r.Header.Get(rules.HeaderSignature) != want || len(r.Header.Values(rules.HeaderSignature)) != 1 {
		t.Errorf("signature %v, want %s", r.Header.Values(rules.HeaderSignature), want)
	}
	if other := rules.FunctionKey([]byte("master"), "team-a", "resize2"); string(other) == string(key) {
		t.Error("two functions share a key")
	}
	if rules.KeyFingerprint(key) == rules.KeyFingerprint([]byte("master")) || len(rules.KeyFingerprint(key)) != 16 {
		t.Errorf("fingerprint %q", rules.KeyFingerprint(key))
	}
}
