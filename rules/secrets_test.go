package rules_test

import (
	"strings"
	"testing"

	"sless.dev/sless/rules"
)

func TestCheckSecretKey(t *testing.T) {
	for key, ok := range map[string]bool{
		"password": true, "tls.crt": true, "a-b_c.D9": true, strings.Repeat("k", 253): true,
		"": false, ".": false, "..": false, "a/b": false, "a b": false, strings.Repeat("k", 254): false, "é": false,
	} {
		if err := rules.CheckSecretKey(key); (err == nil) != ok {
			t.Errorf("CheckSecretKey(%q) = %v, want ok=%v", key, err, ok)
		}
	}
}

func TestCheckSecretDir(t *testing.T) {
	for dir, want := range map[string]string{
		"/var/sless/secrets/db": "", "/srv/conf": "", "/run/secrets/x": "",
		"relative": "absolute", "/": "absolute", "/a/../b": "clean", "/a/": "clean", "/a:b": "absolute",
		"/app": "/app", "/app/conf": "/app", "/etc/ssl": "/etc", "/proc/x": "/proc", "/tmp": "/tmp",
		"/" + strings.Repeat("d", 255): "absolute",
	} {
		err := rules.CheckSecretDir(dir)
		if (err == nil) != (want == "") || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("CheckSecretDir(%q) = %v, want %q", dir, err, want)
		}
	}
	if got := rules.SecretFilePath("db", ""); got != "/var/sless/secrets/db" {
		t.Errorf("default path %q", got)
	}
	for _, c := range []struct {
		a, b    string
		overlap bool
	}{{"/a", "/a", true}, {"/a", "/a/b", true}, {"/a/b", "/a", true}, {"/a", "/ab", false}, {"/a/b", "/a/c", false}} {
		if rules.SecretDirsOverlap(c.a, c.b) != c.overlap {
			t.Errorf("SecretDirsOverlap(%q, %q) != %v", c.a, c.b, c.overlap)
		}
	}
}

// TestSecretsChecksum: it follows the referenced versions (a rotation changes it, the map's
// order does not) and is empty without references.
func TestSecretsChecksum(t *testing.T) {
	a := rules.SecretsChecksum(map[string]int64{"db": 1, "api": 3})
	if a == "" || a != rules.SecretsChecksum(map[string]int64{"api": 3, "db": 1}) {
		t.Fatalf("checksum %q is not stable", a)
	}
	if a == rules.SecretsChecksum(map[string]int64{"db": 2, "api": 3}) {
		t.Error("a rotation left the checksum unchanged")
	}
	if rules.SecretsChecksum(map[string]int64{"db1": 1}) == rules.SecretsChecksum(map[string]int64{"db": 11}) {
		t.Error("different references give one checksum")
	}
	if rules.SecretsChecksum(nil) != "" {
		t.Error("no references, yet a checksum")
	}
}

// TestSecretMasker: every value, and each line of a multi-line one, is masked wherever it
// appears, the longest first; values too short to mask are left.
func TestSecretMasker(t *testing.T) {
	m := rules.NewSecretMasker([][]byte{[]byte("hunter2-long"), []byte("hunter2"), []byte("-----BEGIN KEY-----\r\nAAAAbbbb\n-----END KEY-----"), []byte("ab")})
	for in, want := range map[string]string{
		"password=hunter2-long!":  "password=***!",
		"p=hunter2 q=hunter2":     "p=*** q=***",
		"AAAAbbbb":                "***",
		"key: -----END KEY-----":  "key: ***",
		"ab is too short to mask": "ab is too short to mask",
		"nothing here":            "nothing here",
	} {
		if got := m.Mask(in); got != want {
			t.Errorf("Mask(%q) = %q, want %q", in, got, want)
		}
	}
	var none *rules.SecretMasker
	if none.Mask("x") != "x" || rules.NewSecretMasker([][]byte{[]byte("abc")}) != nil {
		t.Error("a masker of nothing masks")
	}
}
