package gateway

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"

	"sless.dev/sless/gateway/api"
)

var testHMACKey = []byte("unit-test-hmac-key-0123456789abcdef0123")

func sign(t *testing.T, method jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// signRaw signs header and payload as given (HS256 with the test key).
func signRaw(t *testing.T, header, payload string) string {
	t.Helper()
	unsigned := jwtPart(t, header) + "." + jwtPart(t, payload)
	sig, err := jwt.SigningMethodHS256.Sign(unsigned, testHMACKey)
	if err != nil {
		t.Fatal(err)
	}
	return unsigned + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func claims(sub string, exp time.Duration) jwt.MapClaims {
	c := jwt.MapClaims{"exp": time.Now().Add(exp).Unix()}
	if sub != "" {
		c["sub"] = sub
	}
	return c
}

func TestJWTAuthHMAC(t *testing.T) {
	auth, err := NewJWTAuth(JWTConfig{HMACKey: testHMACKey, Leeway: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	good := sign(t, jwt.SigningMethodHS256, testHMACKey, "", claims("alice", time.Hour))
	parts := strings.Split(good, ".")
	tampered := parts[0] + "." + jwtPart(t, `{"sub":"mallory","exp":`+itoa(time.Now().Add(time.Hour).Unix())+`}`) + "." + parts[2]
	cases := []struct {
		name, token string
		ok          bool
	}{
		{"valid", good, true},
		{"payload swapped under the old signature", tampered, false},
		{"other key", sign(t, jwt.SigningMethodHS256, []byte("another-key-0123456789abcdef0123456789"), "", claims("alice", time.Hour)), false},
		{"expired", sign(t, jwt.SigningMethodHS256, testHMACKey, "", claims("alice", -time.Minute)), false},
		{"not yet valid", sign(t, jwt.SigningMethodHS256, testHMACKey, "", jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix(), "nbf": time.Now().Add(time.Hour).Unix()}), false},
		{"no exp", sign(t, jwt.SigningMethodHS256, testHMACKey, "", jwt.MapClaims{"sub": "alice"}), false},
		{"no sub", sign(t, jwt.SigningMethodHS256, testHMACKey, "", claims("", time.Hour)), false},
		{"alg none", sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "", claims("alice", time.Hour)), false},
		{"RS256 when only HMAC is configured", sign(t, jwt.SigningMethodRS256, rsaKey, "k", claims("alice", time.Hour)), false},
		{"not a JWT", "abc.def", false},
		{"empty", "", false},
		{"exp a string holding a number", sign(t, jwt.SigningMethodHS256, testHMACKey, "", jwt.MapClaims{"sub": "alice", "exp": itoa(time.Now().Add(time.Hour).Unix())}), false},
		{"exp not a number", sign(t, jwt.SigningMethodHS256, testHMACKey, "", jwt.MapClaims{"sub": "alice", "exp": "never"}), false},
		{"exp null", sign(t, jwt.SigningMethodHS256, testHMACKey, "", jwt.MapClaims{"sub": "alice", "exp": nil}), false},
		{"nbf a string", sign(t, jwt.SigningMethodHS256, testHMACKey, "", jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix(), "nbf": "0"}), false},
		{"iat a string", sign(t, jwt.SigningMethodHS256, testHMACKey, "", jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix(), "iat": "0"}), false},
		// Issue 24, attack 8: claim names are the registered ones exactly, once; crit fails.
		{"sub and SUB", sign(t, jwt.SigningMethodHS256, testHMACKey, "", jwt.MapClaims{"sub": "alice", "SUB": "dev", "exp": time.Now().Add(time.Hour).Unix()}), false},
		{"Sub alone", sign(t, jwt.SigningMethodHS256, testHMACKey, "", jwt.MapClaims{"Sub": "alice", "exp": time.Now().Add(time.Hour).Unix()}), false},
		{"EXP a string beside exp", sign(t, jwt.SigningMethodHS256, testHMACKey, "", jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix(), "EXP": "string"}), false},
		{"sub twice", signRaw(t, `{"alg":"HS256","typ":"JWT"}`, `{"sub":"alice","sub":"dev","exp":`+itoa(time.Now().Add(time.Hour).Unix())+`}`), false},
		{"unknown crit", signRaw(t, `{"alg":"HS256","typ":"JWT","crit":["x-sless"],"x-sless":1}`, `{"sub":"alice","exp":`+itoa(time.Now().Add(time.Hour).Unix())+`}`), false},
		{"other claims in any case", sign(t, jwt.SigningMethodHS256, testHMACKey, "", jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix(), "Role": "x", "role": "y"}), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, err := auth.Authenticate(context.Background(), tc.token)
			if tc.ok != (err == nil) {
				t.Fatalf("Authenticate = %+v, %v; want ok=%v", id, err, tc.ok)
			}
			if tc.ok && (id.Subject != "alice" || id.Namespace != api.TenantNamespace("alice")) {
				t.Fatalf("identity %+v", id)
			}
		})
	}
}

func TestTenantNamespace(t *testing.T) {
	// The predecessor's documented example: the same sub must map to the same namespace.
	if got := api.TenantNamespace("019cc268-6c6a-781e-8613-4bed4ec7cd20"); got != "sless-ffd1f598c169b0ae" {
		t.Fatalf("TenantNamespace = %s, want sless-ffd1f598c169b0ae", got)
	}
}

// jwksServer serves a key set that the test can rotate, counting fetches.
type jwksServer struct {
	mu      sync.Mutex
	keys    []jose.JSONWebKey
	fetches atomic.Int32
}

func (s *jwksServer) set(keys ...jose.JSONWebKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = keys
}

func (s *jwksServer) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	s.fetches.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: s.keys})
}

func TestJWTAuthJWKSRotation(t *testing.T) {
	rsa1, _ := rsa.GenerateKey(rand.Reader, 2048)
	rsa2, _ := rsa.GenerateKey(rand.Reader, 2048)
	ec1, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	pub := func(k any, kid, alg string) jose.JSONWebKey {
		return jose.JSONWebKey{Key: k, KeyID: kid, Algorithm: alg, Use: "sig"}
	}
	ks := &jwksServer{}
	ks.set(pub(&rsa1.PublicKey, "r1", "RS256"), pub(&ec1.PublicKey, "e1", "ES256"))
	srv := httptest.NewServer(ks)
	defer srv.Close()
	auth, err := NewJWTAuth(JWTConfig{JWKSURL: srv.URL, JWKSMinRefresh: time.Nanosecond, JWKSRefresh: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	check := func(name, tok string, ok bool) {
		t.Helper()
		if _, err := auth.Authenticate(ctx, tok); ok != (err == nil) {
			t.Fatalf("%s: err = %v, want ok=%v", name, err, ok)
		}
	}
	check("RS256 with kid r1", sign(t, jwt.SigningMethodRS256, rsa1, "r1", claims("bob", time.Hour)), true)
	check("ES256 with kid e1", sign(t, jwt.SigningMethodES256, ec1, "e1", claims("bob", time.Hour)), true)
	check("r1's kid, signed by another key", sign(t, jwt.SigningMethodRS256, rsa2, "r1", claims("bob", time.Hour)), false)
	check("ES256 token naming an RSA kid", sign(t, jwt.SigningMethodES256, ec1, "r1", claims("bob", time.Hour)), false)
	check("no kid", sign(t, jwt.SigningMethodRS256, rsa1, "", claims("bob", time.Hour)), false)
	check("HS256 when only a JWKS is configured", sign(t, jwt.SigningMethodHS256, testHMACKey, "", claims("bob", time.Hour)), false)
	check("expired RS256", sign(t, jwt.SigningMethodRS256, rsa1, "r1", claims("bob", -time.Hour)), false)
	fetches := ks.fetches.Load()
	check("r1 again, from the cache", sign(t, jwt.SigningMethodRS256, rsa1, "r1", claims("bob", time.Hour)), true)
	if ks.fetches.Load() != fetches {
		t.Fatal("a known kid fetched the JWKS again")
	}

	// Rotation: the issuer publishes r2 and drops r1. A token with the new kid triggers a
	// fetch and is accepted; r1 is gone after that fetch.
	ks.set(pub(&rsa2.PublicKey, "r2", "RS256"))
	check("rotated key r2", sign(t, jwt.SigningMethodRS256, rsa2, "r2", claims("bob", time.Hour)), true)
	check("retired key r1", sign(t, jwt.SigningMethodRS256, rsa1, "r1", claims("bob", time.Hour)), false)
}

func TestJWTAuthUnknownKidIsRateLimited(t *testing.T) {
	ks := &jwksServer{}
	srv := httptest.NewServer(ks)
	defer srv.Close()
	auth, err := NewJWTAuth(JWTConfig{JWKSURL: srv.URL, JWKSMinRefresh: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	for i := range 5 {
		tok := sign(t, jwt.SigningMethodRS256, key, "forged-"+itoa(int64(i)), claims("eve", time.Hour))
		if _, err := auth.Authenticate(context.Background(), tok); err == nil {
			t.Fatal("a token with an unknown kid was accepted")
		}
	}
	if n := ks.fetches.Load(); n != 1 {
		t.Fatalf("%d JWKS fetches for 5 unknown kids, want 1 (rate-limited)", n)
	}
}

// TestJWKSSlowIssuer: a refresh that hangs holds up no token whose key is known, every
// caller that needs the refresh shares the one fetch, and one that gives up is answered at
// once.
func TestJWKSSlowIssuer(t *testing.T) {
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	ks := &jwksServer{}
	ks.set(jose.JSONWebKey{Key: &key.PublicKey, KeyID: "r1", Algorithm: "RS256", Use: "sig"})
	var slow atomic.Bool
	var asked atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		if slow.Load() {
			<-release
		}
		ks.ServeHTTP(w, r)
	}))
	defer srv.Close()
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock()
	// Every check finds the key set old and wants a refresh.
	auth, err := NewJWTAuth(JWTConfig{JWKSURL: srv.URL, JWKSRefresh: time.Nanosecond, JWKSMinRefresh: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	known := sign(t, jwt.SigningMethodRS256, key, "r1", claims("bob", time.Hour))
	if _, err := auth.Authenticate(context.Background(), known); err != nil {
		t.Fatal(err)
	}
	slow.Store(true)
	done := make(chan error, 20)
	for range 20 {
		go func() {
			_, err := auth.Authenticate(context.Background(), known)
			done <- err
		}()
	}
	timeout := time.After(2 * time.Second)
	for range 20 {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("known key during a refresh: %v", err)
			}
		case <-timeout:
			unblock()
			t.Fatal("token checks with a known key waited for the JWKS refresh")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := auth.Authenticate(ctx, sign(t, jwt.SigningMethodRS256, key, "r2", claims("bob", time.Hour))); err == nil {
		t.Error("an unknown kid was accepted")
	}
	if waited := time.Since(start); waited > time.Second {
		t.Errorf("an unknown kid whose caller gave up after 200 ms waited %s", waited)
	}
	if n := asked.Load(); n != 2 {
		t.Errorf("%d JWKS fetches, want 2: the first and one refresh shared by every caller", n)
	}
}

func TestNewJWTAuthRejectsWeakConfig(t *testing.T) {
	for name, cfg := range map[string]JWTConfig{
		"nothing":      {},
		"short key":    {HMACKey: []byte("short")},
		"bad JWKS URL": {JWKSURL: "file:///etc/keys"},
	} {
		if _, err := NewJWTAuth(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func jwtPart(t *testing.T, s string) string {
	t.Helper()
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestJWTAuthJWKSOutage keeps verifying with the known keys when the issuer's JWKS endpoint
// fails, instead of locking every tenant out.
func TestJWTAuthJWKSOutage(t *testing.T) {
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	ks := &jwksServer{}
	ks.set(jose.JSONWebKey{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"})
	var down atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
			return
		}
		ks.ServeHTTP(w, r)
	}))
	defer srv.Close()
	auth, err := NewJWTAuth(JWTConfig{JWKSURL: srv.URL, JWKSRefresh: time.Nanosecond, JWKSMinRefresh: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	tok := sign(t, jwt.SigningMethodRS256, key, "k1", claims("carol", time.Hour))
	if _, err := auth.Authenticate(context.Background(), tok); err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	fetches := ks.fetches.Load()
	if _, err := auth.Authenticate(context.Background(), tok); err != nil {
		t.Fatalf("known key rejected while the JWKS endpoint is down: %v", err)
	}
	if _, err := auth.Authenticate(context.Background(), sign(t, jwt.SigningMethodRS256, key, "k2", claims("carol", time.Hour))); err == nil {
		t.Fatal("an unknown kid was accepted while the JWKS endpoint is down")
	}
	if ks.fetches.Load() != fetches {
		t.Fatal("the failing endpoint served keys")
	}
}

// TestBearerToken: the scheme is matched case-insensitively (RFC 9110) and a header that is
// not of the Bearer scheme is an error, never a token.
func TestBearerToken(t *testing.T) {
	cases := []struct {
		name, header, token string
		ok                  bool
	}{
		{"no header", "", "", true},
		{"Bearer", "Bearer abc.def.ghi", "abc.def.ghi", true},
		{"lower case", "bearer abc.def.ghi", "abc.def.ghi", true},
		{"upper case", "BEARER abc.def.ghi", "abc.def.ghi", true},
		{"extra spaces", "  Bearer   abc.def.ghi  ", "abc.def.ghi", true},
		{"token without a scheme", "abc.def.ghi", "", false},
		{"scheme without a token", "Bearer", "", false},
		{"scheme and blanks", "Bearer   ", "", false},
		{"Basic", "Basic dXNlcjpwYXNz", "", false},
		{"Bearer glued to the token", "Bearerabc.def.ghi", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/v1/whoami", nil)
			if tc.header != "" {
				r.Header.Set("Authorization", tc.header)
			}
			token, err := bearerToken(r)
			if (err == nil) != tc.ok || token != tc.token {
				t.Fatalf("bearerToken(%q) = %q, %v; want %q, ok=%v", tc.header, token, err, tc.token, tc.ok)
			}
		})
	}
}
