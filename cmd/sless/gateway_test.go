package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"sless.dev/sless/gateway"
)

// TestGatewayAuthenticatorFlags checks that the gateway never starts without token
// verification unless asked to, and reads the HMAC key the way Secrets mount it.
func TestGatewayAuthenticatorFlags(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("k", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cases := []struct {
		name    string
		env     string
		flags   gatewayFlags
		wantErr string
		noAuth  bool
	}{
		{name: "nothing configured", wantErr: "no token verification configured"},
		{name: "insecure", flags: gatewayFlags{insecureNoAuth: true}, noAuth: true},
		{name: "insecure contradicts a key", env: strings.Repeat("k", 40), flags: gatewayFlags{insecureNoAuth: true}, wantErr: "contradicts"},
		{name: "key from env", env: strings.Repeat("k", 40)},
		{name: "key file with trailing newline", flags: gatewayFlags{hmacKeyFile: keyFile}},
		{name: "missing key file", flags: gatewayFlags{hmacKeyFile: keyFile + ".missing"}, wantErr: "--jwt-hmac-key-file"},
		{name: "short key", env: "short", wantErr: "shorter than 32 bytes"},
		{name: "JWKS", flags: gatewayFlags{jwksURL: "https://issuer.example/.well-known/jwks.json"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SLESS_JWT_HMAC_KEY", tc.env)
			auth, err := tc.flags.authenticator(log)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, isNoAuth := auth.(gateway.NoAuth); isNoAuth != tc.noAuth {
				t.Fatalf("authenticator %T", auth)
			}
			if tc.flags.hmacKeyFile != "" { // the newline is not part of the key
				tok, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{Subject: "s",
					ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Minute))}).SignedString([]byte(strings.Repeat("k", 40)))
				if _, err := auth.Authenticate(context.Background(), tok); err != nil {
					t.Fatalf("token signed with the file's key: %v", err)
				}
			}
		})
	}
}
