package rules

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Secrets: a tenant's named sets of values that functions reference (secret_env,
// secret_files) and event triggers read their broker URL from. A secret's name is an object
// name (CheckName); its keys are Kubernetes Secret keys, which are also the file names of a
// mounted secret.

// secretKeyPattern is a Kubernetes Secret key (and so a file name): letters, digits, '-',
// '_' and '.'.
var secretKeyPattern = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)

const (
	// MaxSecretKeys bounds the keys of one secret; MaxSecretBytes the keys and values of one
	// secret together (Kubernetes refuses a Secret above 1 MiB; a quarter of that keeps
	// every pod start and every copy of it cheap).
	MaxSecretKeys, MaxSecretKeyLength, MaxSecretBytes = 64, 253, 256 << 10
	// MaxSecretRefs bounds a function's secret_env and secret_files entries each;
	// MaxSecretPathLength a secret_files path.
	MaxSecretRefs, MaxSecretPathLength = 64, 255
	// SecretMountDir holds a function's secret files when secret_files gives no path:
	// SecretMountDir/<secret>/<key>.
	SecretMountDir = "/var/sless/secrets"
	// SecretLabel marks a Kubernetes Secret as one of the secrets API's (value "true"); the
	// gateway lists and changes no other Secret of a namespace.
	SecretLabel = "sless.dev/secret"
	// SecretVersionAnnotation counts a secret's data replacements (1 at creation); a pod
	// template carries a checksum of the versions it references (SecretsChecksum), never the
	// values, so a rotation rolls the pods.
	SecretVersionAnnotation = "sless.dev/secret-version"
	// SecretUpdatedAnnotation is when its data was last replaced (RFC 3339).
	SecretUpdatedAnnotation = "sless.dev/secret-updated-at"
	// SecretsChecksumAnnotation is the pod-template annotation that holds SecretsChecksum.
	SecretsChecksumAnnotation = "sless.dev/secrets-checksum"
	// SecretMask replaces a referenced secret value in logs, the history and async results.
	SecretMask = "***"
)

// ReservedEnvNames are variables a function may not set, by env_vars or secret_env: the
// loader's, the interpreters' and the wrappers' own (a value there would change what runs
// before the handler does, or how the platform reaches it). The SLESS_ prefix is reserved
// too (EnvReservedPrefix).
var ReservedEnvNames = []string{
	"HOME", "LD_AUDIT", "LD_LIBRARY_PATH", "LD_PRELOAD", "NODE_OPTIONS", "NODE_PATH", "PATH", "PORT",
	"PYTHONHOME", "PYTHONINSPECT", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONUSERBASE",
}

// CheckSecretKey reports why key is not a valid key of a secret, or nil.
func CheckSecretKey(key string) error {
	if len(key) == 0 || len(key) > MaxSecretKeyLength || !secretKeyPattern.MatchString(key) || key == "." || key == ".." {
		return fmt.Errorf("%q is not a valid key: use at most %d letters, digits, '-', '_' and '.' (not . or ..)", key, MaxSecretKeyLength)
	}
	return nil
}

// SecretFilePath is where the keys of secret are mounted when dir is "" (dir otherwise).
func SecretFilePath(secret, dir string) string {
	if dir != "" {
		return dir
	}
	return SecretMountDir + "/" + secret
}

// reservedDirs are where a secret's files may not be mounted: the system's own trees and
// the function's code (/app), which a mount would hide.
var reservedDirs = []string{"/app", "/bin", "/dev", "/etc", "/lib", "/lib64", "/proc", "/sbin", "/sys", "/tmp", "/usr"}

// CheckSecretDir reports why dir may not hold a secret's files, or nil: an absolute, clean
// path of at most 255 bytes, not / and not in or above a system directory.
func CheckSecretDir(dir string) error {
	if len(dir) > MaxSecretPathLength || !path.IsAbs(dir) || path.Clean(dir) != dir || dir == "/" || strings.ContainsAny(dir, ":\x00") {
		return fmt.Errorf("%q is not a directory for secret files: use an absolute, clean path such as %s/<secret>", dir, SecretMountDir)
	}
	for _, r := range reservedDirs {
		if dir == r || strings.HasPrefix(dir, r+"/") {
			return fmt.Errorf("%q is in %s, which a mount would hide; use a path such as %s/<secret>", dir, r, SecretMountDir)
		}
	}
	return nil
}

// SecretDirsOverlap reports whether a and b are the same directory or one holds the other
// (two mounts there would hide one another).
func SecretDirsOverlap(a, b string) bool {
	return a == b || strings.HasPrefix(a, b+"/") || strings.HasPrefix(b, a+"/")
}

// SecretsChecksum is the pod-template checksum of the secret versions a function
// references (name → version): it changes when a referenced secret is rotated and tells
// nothing about the values.
func SecretsChecksum(versions map[string]int64) string {
	if len(versions) == 0 {
		return ""
	}
	h := sha256.New()
	for _, name := range slices.Sorted(maps.Keys(versions)) {
		h.Write([]byte(name + "=" + strconv.FormatInt(versions[name], 10) + "\n"))
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// minMasked is the shortest value (or line of a value) masked: shorter ones would garble
// every line that happens to hold those few characters, and hide nothing worth hiding.
const minMasked = 4

// SecretMasker replaces the values it was made from with SecretMask wherever they appear in
// a function's output (each line of a multi-line value on its own, as a value printed line
// by line appears), the longest first. Values shorter than 4 bytes are not masked. A nil
// masker masks nothing.
type SecretMasker struct{ r *strings.Replacer }

// NewSecretMasker masks values; nil when none is long enough to mask.
func NewSecretMasker(values [][]byte) *SecretMasker {
	seen := map[string]bool{}
	var parts []string
	for _, v := range values {
		for line := range strings.SplitSeq(string(v), "\n") {
			line = strings.TrimRight(line, "\r")
			if len(line) >= minMasked && !seen[line] {
				seen[line] = true
				parts = append(parts, line)
			}
		}
	}
	if len(parts) == 0 {
		return nil
	}
	slices.SortFunc(parts, func(a, b string) int { return len(b) - len(a) })
	pairs := make([]string, 0, 2*len(parts))
	for _, p := range parts {
		pairs = append(pairs, p, SecretMask)
	}
	return &SecretMasker{strings.NewReplacer(pairs...)}
}

// Mask returns s with every value masked.
func (m *SecretMasker) Mask(s string) string {
	if m == nil {
		return s
	}
	return m.r.Replace(s)
}

// SecretDataError is why a secret's data is refused: Field is the API field at fault
// ("data", "data.<key>", "data_base64.<key>"); TooLarge marks the size cap. Its message
// names keys and sizes, never a value.
type SecretDataError struct {
	Field, Reason string
	TooLarge      bool
}

func (e *SecretDataError) Error() string { return e.Field + ": " + e.Reason }

// SecretData is a secret's data from its text values (data) and binary ones (data_base64,
// standard base64): each key valid and in one map only, 1 to MaxSecretKeys keys, at most
// MaxSecretBytes of keys and decoded values. The API and the Terraform provider's plan both
// take a secret's data through it.
func SecretData(text, b64 map[string]string) (map[string][]byte, *SecretDataError) {
	data := make(map[string][]byte, len(text)+len(b64))
	for _, k := range slices.Sorted(maps.Keys(text)) {
		if err := CheckSecretKey(k); err != nil {
			return nil, &SecretDataError{Field: "data." + k, Reason: err.Error()}
		}
		data[k] = []byte(text[k])
	}
	for _, k := range slices.Sorted(maps.Keys(b64)) {
		if err := CheckSecretKey(k); err != nil {
			return nil, &SecretDataError{Field: "data_base64." + k, Reason: err.Error()}
		}
		if _, dup := data[k]; dup {
			return nil, &SecretDataError{Field: "data_base64." + k, Reason: fmt.Sprintf("key %q is also in data; give each key in one of data (text) and data_base64 (binary)", k)}
		}
		v, err := base64.StdEncoding.DecodeString(b64[k])
		if err != nil {
			return nil, &SecretDataError{Field: "data_base64." + k, Reason: fmt.Sprintf("not standard base64 (%v); encode the value with base64, or send text in data", err)}
		}
		data[k] = v
	}
	switch {
	case len(data) == 0:
		return nil, &SecretDataError{Field: "data", Reason: "a secret needs at least one key in data or data_base64"}
	case len(data) > MaxSecretKeys:
		return nil, &SecretDataError{Field: "data", Reason: fmt.Sprintf("%d keys; a secret holds at most %d", len(data), MaxSecretKeys)}
	}
	total := 0
	for k, v := range data {
		total += len(k) + len(v)
	}
	if total > MaxSecretBytes {
		return nil, &SecretDataError{Field: "data", TooLarge: true,
			Reason: fmt.Sprintf("the secret holds %d bytes in keys and values; at most %d are allowed (keep large data in storage and the credentials to it here)", total, MaxSecretBytes)}
	}
	return data, nil
}
