package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Signed calls (runtimes/README.md): the platform signs every call it makes to the function
// with the function's key (SLESS_IDENTITY_KEY). With a key, only the health path is served
// without a valid, fresh signature; without one, a call carrying any X-Sless-* header is
// refused, as nothing could vouch for it. The signer is rules.Signature; the same vectors
// (rules/rulestest/identity.json) hold this verifier and the Python and Node ones equal to it.

const (
	identityKeyEnv  = "SLESS_IDENTITY_KEY"
	signatureHeader = "X-Sless-Signature"
	signatureAhead  = 5 * 60  // seconds a signature's time may lie after the clock
	signatureBehind = 15 * 60 // and before it (skew plus a cold start's hold)
)

var signaturePattern = regexp.MustCompile(`^t=([0-9]{1,12}),v1=([0-9a-f]{64})$`)

// identityKey is the function's key: nil without one, keyOK false when the variable is not
// 64 hex digits (every call is then refused: a key that cannot verify must not let calls
// through). The variable leaves the environment, so neither the handler's children nor a
// handler that prints its environment pass it on.
var identityKey, identityKeyOK = loadIdentityKey()

func loadIdentityKey() ([]byte, bool) {
	raw, set := os.LookupEnv(identityKeyEnv)
	if !set {
		return nil, true
	}
	_ = os.Unsetenv(identityKeyEnv)
	key, err := hex.DecodeString(raw)
	if err != nil || len(key) != sha256.Size {
		return []byte{}, false
	}
	return key, true
}

// refusal is why a call is not served: its status, reason (identity.json's) and message.
type refusal struct {
	status       int
	reason, text string
}

// verifyIdentity checks a call (its method, request target and headers) against key at
// now; nil lets it through to the handler.
func verifyIdentity(key []byte, keyOK bool, method, target string, h http.Header, now time.Time) *refusal {
	if !keyOK {
		return &refusal{http.StatusInternalServerError, "badkey", identityKeyEnv + " is not 64 hex digits: the function cannot verify its calls"}
	}
	var names []string
	for name, values := range h {
		if strings.HasPrefix(strings.ToLower(name), "x-sless-") {
			if len(values) > 1 {
				return &refusal{http.StatusUnauthorized, "malformed", name + " appears more than once; the platform sends each X-Sless-* header once"}
			}
			if !strings.EqualFold(name, signatureHeader) {
				names = append(names, name)
			}
		}
	}
	sig := h.Values(signatureHeader)
	switch {
	case key == nil && (len(names) > 0 || len(sig) > 0):
		return &refusal{http.StatusUnauthorized, "nokey", "X-Sless-* headers cannot be verified: the function has no " + identityKeyEnv}
	case key == nil:
		return nil
	case len(sig) == 0:
		return &refusal{http.StatusUnauthorized, "unsigned", "the function takes calls from the sless platform only (its gateway, dispatchers): this one has no " + signatureHeader}
	}
	m := signaturePattern.FindStringSubmatch(sig[0])
	if m == nil {
		return &refusal{http.StatusUnauthorized, "malformed", signatureHeader + " is not t=<unix seconds>,v1=<64 lower-case hex digits>"}
	}
	t, _ := strconv.ParseInt(m[1], 10, 64)
	if age := now.Unix() - t; age < -signatureAhead || age > signatureBehind {
		return &refusal{http.StatusUnauthorized, "stale", signatureHeader + " is outside its time window (5 minutes ahead, 15 minutes behind the function's clock)"}
	}
	sort.Slice(names, func(i, j int) bool { return strings.ToLower(names[i]) < strings.ToLower(names[j]) })
	var b strings.Builder
	b.WriteString("sless-signature-v1\n" + strconv.FormatInt(t, 10) + "\n" + method + "\n")
	path, _, _ := strings.Cut(target, "?")
	b.WriteString(path + "\n")
	for _, name := range names {
		b.WriteString(strings.ToLower(name) + ":" + strings.Trim(h[name][0], " \t") + "\n")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(b.String()))
	want, _ := hex.DecodeString(m[2])
	if !hmac.Equal(mac.Sum(nil), want) {
		return &refusal{http.StatusUnauthorized, "mismatch", signatureHeader + " does not match the call: an X-Sless-* header, the method or the path changed after the platform signed it, or it was signed for another function"}
	}
	return nil
}
