// Package testkit holds the helpers the test suites of several packages each wrote for
// themselves: polling until a condition holds, zip archives of sources to upload, tokens
// signed the way the gateway verifies them, and whether a process is alive.
package testkit

import (
	"archive/zip"
	"bytes"
	"io"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// WaitFor polls cond every 20 ms until it holds, failing t after timeout with what it
// waited for.
func WaitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Zip is a zip archive of files (name → content), written in name order so the same files
// give the same bytes.
func Zip(t testing.TB, files map[string]string) []byte {
	t.Helper()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, n := range names {
		w, err := zw.Create(n)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(w, files[n]); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Token is an HS256 token for sub signed with key, valid for two hours (longer than any suite runs).
func Token(t testing.TB, key []byte, sub string) string {
	t.Helper()
	claims := jwt.RegisteredClaims{Subject: sub, ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Alive says whether a process with this pid exists.
func Alive(pid int) bool { return syscall.Kill(pid, 0) == nil }
