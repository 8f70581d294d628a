package gateway

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
	"github.com/labstack/echo/v4"
	"golang.org/x/sync/singleflight"

	"sless.dev/sless/gateway/api"
)

// Identity is an authenticated caller. Namespace is the only tenant namespace it may use; ""
// means every namespace (NoAuth only).
type Identity struct {
	Subject   string
	Namespace string
}

// Authenticator verifies a bearer token.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (Identity, error)
}

// NoAuth accepts any request as an operator of every namespace: for `sless dev` on loopback
// and tests only.
type NoAuth struct{}

// Authenticate accepts everything.
func (NoAuth) Authenticate(context.Context, string) (Identity, error) {
	return Identity{Subject: "anonymous"}, nil
}

// JWTConfig configures JWT verification. Set HMACKey (HS256), JWKSURL (RS256/ES256, keys
// picked by kid) or both.
type JWTConfig struct {
	HMACKey []byte
	JWKSURL string
	// Issuer and Audience are checked when set.
	Issuer, Audience string
	// Leeway tolerates clock skew in exp/nbf. Default 30s.
	Leeway time.Duration
	// JWKSRefresh is the most a key set is kept before it is fetched again. Default 5m.
	JWKSRefresh time.Duration
	// JWKSMinRefresh is the least time between fetches triggered by an unknown kid, so forged
	// kids cannot hammer the key server. Default 10s.
	JWKSMinRefresh time.Duration
	// HTTPClient fetches the JWKS. Default: 10s timeout.
	HTTPClient *http.Client
}

// JWTAuth verifies signed JWTs and derives the tenant namespace from sub.
type JWTAuth struct {
	cfg    JWTConfig
	parser *jwt.Parser
	jwks   *jwksCache
}

var _ Authenticator = (*JWTAuth)(nil)

// NewJWTAuth validates cfg and returns the verifier.
func NewJWTAuth(cfg JWTConfig) (*JWTAuth, error) {
	var methods []string
	if len(cfg.HMACKey) > 0 {
		if len(cfg.HMACKey) < 32 {
			return nil, errors.New("JWT HMAC key is shorter than 32 bytes; use a random key of at least 32 bytes")
		}
		methods = append(methods, "HS256")
	}
	a := &JWTAuth{cfg: cfg}
	if cfg.JWKSURL != "" {
		if !strings.HasPrefix(cfg.JWKSURL, "https://") && !strings.HasPrefix(cfg.JWKSURL, "http://") {
			return nil, fmt.Errorf("JWKS URL %q: want an http(s) URL", cfg.JWKSURL)
		}
		methods = append(methods, "RS256", "ES256")
		a.jwks = newJWKSCache(cfg)
	}
	if len(methods) == 0 {
		return nil, errors.New("JWT verification needs an HMAC key or a JWKS URL")
	}
	if cfg.Leeway == 0 {
		cfg.Leeway = 30 * time.Second
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods(methods), jwt.WithExpirationRequired(), jwt.WithLeeway(cfg.Leeway)}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	a.parser = jwt.NewParser(opts...)
	return a, nil
}

// Authenticate verifies the token's signature, exp, nbf (and iss/aud when configured) and
// maps its sub to the tenant namespace.
func (a *JWTAuth) Authenticate(ctx context.Context, token string) (Identity, error) {
	if token == "" {
		return Identity{}, errMissingToken
	}
	var claims numericClaims
	_, err := a.parser.ParseWithClaims(token, &claims, func(t *jwt.Token) (any, error) {
		// RFC 7515 4.1.11: an extension the recipient does not understand fails the token,
		// and this verifier understands none.
		if crit, ok := t.Header["crit"]; ok {
			return nil, fmt.Errorf("token header crit %v names extensions this gateway does not understand", crit)
		}
		if t.Method.Alg() == "HS256" {
			return a.cfg.HMACKey, nil
		}
		kid, _ := t.Header["kid"].(string)
		if kid == "" {
			return nil, errors.New("token has no kid header")
		}
		return a.jwks.key(ctx, kid, t.Method.Alg())
	})
	if err != nil {
		return Identity{}, fmt.Errorf("invalid token: %w", err)
	}
	if claims.Subject == "" {
		return Identity{}, errors.New("invalid token: no sub claim")
	}
	return Identity{Subject: claims.Subject, Namespace: api.TenantNamespace(claims.Subject)}, nil
}

// numericClaims are the registered claims with exp, nbf and iat held to RFC 7519's
// NumericDate, a JSON number: golang-jwt also takes a string that holds one.
type numericClaims struct{ jwt.RegisteredClaims }

// registeredClaims are the names RegisteredClaims decodes. encoding/json matches names
// case-insensitively, so "SUB" would set the subject too.
var registeredClaims = []string{"iss", "sub", "aud", "exp", "nbf", "iat", "jti"}

func (c *numericClaims) UnmarshalJSON(b []byte) error {
	if err := uniqueRegisteredClaims(b); err != nil {
		return err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	for _, k := range []string{"exp", "nbf", "iat"} {
		if v, ok := raw[k]; ok && (len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9'))) {
			return fmt.Errorf("claim %s is %s, not a number of seconds", k, v)
		}
	}
	return json.Unmarshal(b, &c.RegisteredClaims)
}

// uniqueRegisteredClaims refuses a claims object in which a registered claim appears twice
// or in another case: one reader of the token could take one and another the other.
func uniqueRegisteredClaims(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return errors.New("claims are not a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		name, _ := t.(string)
		if lower := strings.ToLower(name); slices.Contains(registeredClaims, lower) {
			switch {
			case name != lower:
				return fmt.Errorf("claim %q is the registered claim %q in another case", name, lower)
			case seen[lower]:
				return fmt.Errorf("claim %q appears twice", name)
			}
			seen[lower] = true
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return err
		}
	}
	return nil
}

// jwksCache holds a JWKS and refetches it when it is old or a token names an unknown kid. No
// lock is held across a fetch: one fetch runs at a time (singleflight) and callers whose key
// is known go on with the keys they have while it runs.
type jwksCache struct {
	cfg   JWTConfig
	fetch singleflight.Group

	mu        sync.Mutex
	keys      jose.JSONWebKeySet
	fetched   time.Time // last successful fetch
	attempted time.Time // end of the last fetch, successful or not
}

func newJWKSCache(cfg JWTConfig) *jwksCache {
	if cfg.JWKSRefresh == 0 {
		cfg.JWKSRefresh = 5 * time.Minute
	}
	if cfg.JWKSMinRefresh == 0 {
		cfg.JWKSMinRefresh = 10 * time.Second
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	return &jwksCache{cfg: cfg}
}

// key returns the public key for kid, usable with alg. A known kid is answered at once, an
// old key set refreshed behind it; an unknown kid waits for a fetch, at most one per
// JWKSMinRefresh (forged kids cannot make the gateway hammer the issuer).
func (c *jwksCache) key(ctx context.Context, kid, alg string) (any, error) {
	c.mu.Lock()
	keys := c.keys.Key(kid)
	due := (time.Since(c.fetched) > c.cfg.JWKSRefresh || len(keys) == 0) && time.Since(c.attempted) > c.cfg.JWKSMinRefresh
	c.mu.Unlock()
	if due {
		// The fetch is the cache's, not the request's: a caller that gives up does not cut
		// it short for the others.
		ch := c.fetch.DoChan("jwks", func() (any, error) { return nil, c.refresh(context.WithoutCancel(ctx)) })
		if len(keys) == 0 {
			select {
			case res := <-ch:
				if res.Err != nil {
					return nil, res.Err
				}
			case <-ctx.Done():
				return nil, fmt.Errorf("waiting for the JWKS: %w", ctx.Err())
			}
			c.mu.Lock()
			keys = c.keys.Key(kid)
			c.mu.Unlock()
		}
	}
	for _, k := range keys {
		if k.Algorithm != "" && k.Algorithm != alg {
			continue
		}
		switch pk := k.Key.(type) {
		case *rsa.PublicKey:
			if alg == "RS256" {
				return pk, nil
			}
		case *ecdsa.PublicKey:
			if alg == "ES256" {
				return pk, nil
			}
		}
	}
	return nil, fmt.Errorf("no %s key with kid %q in the JWKS", alg, kid)
}

// refresh fetches the key set; when the issuer is unreachable the keys already known stay.
func (c *jwksCache) refresh(ctx context.Context) error {
	set, err := c.get(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.attempted = time.Now()
	if err != nil {
		return err
	}
	c.keys, c.fetched = set, c.attempted
	return nil
}

func (c *jwksCache) get(ctx context.Context) (jose.JSONWebKeySet, error) {
	var set jose.JSONWebKeySet
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.cfg.JWKSURL, nil)
	if err != nil {
		return set, fmt.Errorf("fetch JWKS: %w", err)
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return set, fmt.Errorf("fetch JWKS from %s: %w", c.cfg.JWKSURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return set, fmt.Errorf("fetch JWKS from %s: status %d", c.cfg.JWKSURL, resp.StatusCode)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&set); err != nil {
		return set, fmt.Errorf("decode JWKS from %s: %w", c.cfg.JWKSURL, err)
	}
	return set, nil
}

func identityOf(c echo.Context) Identity {
	id, _ := c.Get("identity").(Identity)
	return id
}

var errMissingToken = errors.New("missing bearer token: send Authorization: Bearer <JWT>")

// bearerToken returns the token of an Authorization header of the Bearer scheme (matched
// case-insensitively, RFC 9110), "" without the header. Any other form is an error: a bare
// token must not pass for one.
func bearerToken(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", nil
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", errors.New("the Authorization header is not of the form 'Bearer <JWT>'")
	}
	if token = strings.TrimSpace(token); token == "" {
		return "", errMissingToken
	}
	return token, nil
}

// authenticateRequest verifies the request's bearer token.
func authenticateRequest(a Authenticator, r *http.Request) (Identity, error) {
	token, err := bearerToken(r)
	if err != nil {
		return Identity{}, err
	}
	return a.Authenticate(r.Context(), token)
}

// authenticate is the /v1 middleware: a valid token or 401.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id, err := authenticateRequest(s.cfg.Auth, c.Request())
		if err != nil {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="sless"`)
			return &httpError{Code: http.StatusUnauthorized, Msg: err.Error()}
		}
		c.Set("identity", id)
		return next(c)
	}
}

// authorizeNamespace rejects a URL naming a namespace other than the caller's tenant.
func (s *Server) authorizeNamespace(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		ns := c.Param("ns")
		if err := validName("namespace", ns); err != nil {
			return err
		}
		if err := allowNamespace(identityOf(c), ns); err != nil {
			return err
		}
		return next(c)
	}
}

func allowNamespace(id Identity, ns string) error {
	if id.Namespace != "" && id.Namespace != ns {
		return &httpError{Code: http.StatusForbidden, Msg: fmt.Sprintf("namespace %s belongs to another tenant; your namespace is %s", ns, id.Namespace)}
	}
	return nil
}
