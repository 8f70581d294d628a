package rules

import (
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Signed calls: the platform signs every request it makes to a function (the gateway's /fn/
// calls, a dispatcher's event, cron and asynchronous calls) with a key of that function, and
// the wrappers serve nothing else but their health path (runtimes/README.md, "Signed calls").
// The X-Sless-* headers a function gets (the caller's verified identity, the trigger's) are
// therefore the platform's whatever reaches the function's pod: a forged one, or a call that
// skipped the gateway's require_auth, is refused by the function itself, with or without a
// NetworkPolicy in force. The wrappers' own verifiers are held equal to this rule by
// rulestest/identity.json.
const (
	// HeaderSignature carries t=<unix seconds>,v1=<hex HMAC-SHA256 of SignedString>.
	HeaderSignature = "X-Sless-Signature"
	// EnvIdentityKey is the variable holding a function's key (FunctionKey, hex) in its
	// wrapper's and its dispatchers' environment.
	EnvIdentityKey = "SLESS_IDENTITY_KEY"
	// SignatureAhead and SignatureBehind bound how far a signature's time may lie after and
	// before the function's clock: clock skew ahead; behind, skew plus the longest the
	// interceptor holds a call for a cold start (MaxColdStartHold).
	SignatureAhead  = 5 * time.Minute
	SignatureBehind = 15 * time.Minute
	// MaxColdStartHold is the longest cold-start hold (the operator's --cold-start-timeout)
	// a signed call survives.
	MaxColdStartHold = SignatureBehind - SignatureAhead
	// IdentityMasterBytes is the size of the platform's master key.
	IdentityMasterBytes = 32
	// signaturePrefix names the version of the signed string.
	signaturePrefix = "sless-signature-v1"
	headerPrefix    = "x-sless-"
)

// FunctionKey is the key of function namespace/name, derived from the platform's master key:
// gateways and dispatchers need only the master, a function gets only its own key (with it,
// it can sign calls to itself and nothing else).
func FunctionKey(master []byte, namespace, name string) []byte {
	m := hmac.New(sha256.New, master)
	m.Write([]byte(namespace + "/" + name))
	return m.Sum(nil)
}

// KeyFingerprint is a short public name of a key (a pod template carries the master's, so
// pods roll when it is replaced); it reveals nothing of the key.
func KeyFingerprint(key []byte) string {
	sum := sha256.Sum256(append([]byte("sless-key-fingerprint\n"), key...))
	return hex.EncodeToString(sum[:8])
}

// SignaturePath is the path a signature binds for a request to u: its request target up to
// the query, as written on the wire.
func SignaturePath(u *url.URL) string {
	p, _, _ := strings.Cut(u.RequestURI(), "?")
	return p
}

// SignedString is what a signature covers: its version and time, the request's method and
// path (SignaturePath), and every X-Sless-* header h carries but the signature itself, one
// line each, lower-case name and value without surrounding blanks, sorted by name.
func SignedString(t int64, method, path string, h http.Header) []byte {
	var names []string
	for k := range h {
		if len(k) >= len(headerPrefix) && strings.EqualFold(k[:len(headerPrefix)], headerPrefix) && !strings.EqualFold(k, HeaderSignature) {
			names = append(names, k)
		}
	}
	slices.SortFunc(names, func(a, b string) int { return strings.Compare(strings.ToLower(a), strings.ToLower(b)) })
	var b strings.Builder
	b.WriteString(signaturePrefix + "\n" + strconv.FormatInt(t, 10) + "\n" + method + "\n" + path + "\n")
	for _, k := range names {
		for _, v := range h[k] {
			b.WriteString(strings.ToLower(k) + ":" + strings.Trim(v, " \t") + "\n")
		}
	}
	return []byte(b.String())
}

// Signature is the value of HeaderSignature for SignedString(t, …) under key.
func Signature(key []byte, t int64, method, path string, h http.Header) string {
	m := hmac.New(sha256.New, key)
	m.Write(SignedString(t, method, path, h))
	return "t=" + strconv.FormatInt(t, 10) + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

// SignRequest signs r, a request to a function with key, at now: over the X-Sless-*
// headers set on it so far, which no one may change after.
func SignRequest(r *http.Request, key []byte, now time.Time) {
	r.Header.Set(HeaderSignature, Signature(key, now.Unix(), cmp.Or(r.Method, http.MethodGet), SignaturePath(r.URL), r.Header))
}
