package buildkit

import (
	"errors"
	"fmt"
	"net/http"
)

// Rule names the validation rule an upload broke; tests and callers match on it.
type Rule string

// Validation rules. The size rules map to 413, every other rule to 400.
const (
	RuleZipTooLarge          Rule = "zip-too-large"
	RuleUncompressedTooLarge Rule = "uncompressed-too-large"
	RuleTooManyEntries       Rule = "too-many-entries"
	RuleCompressionRatio     Rule = "compression-ratio"
	RuleNotZip               Rule = "not-a-zip"
	RuleCorrupt              Rule = "corrupt-entry"
	RuleUnsupportedEntry     Rule = "unsupported-entry" // encrypted or an unknown compression method
	RuleInvalidName          Rule = "invalid-name"
	RuleAbsolutePath         Rule = "absolute-path"
	RuleParentPath           Rule = "parent-path"
	RuleSymlink              Rule = "symlink"
	RuleSpecialFile          Rule = "special-file"
	RuleDuplicateName        Rule = "duplicate-name"
	RuleNoEntrypoint         Rule = "no-entrypoint"
	RuleInvalidEntrypoint    Rule = "invalid-entrypoint"
	RuleBadManifest          Rule = "bad-manifest" // go.mod or package.json the build would reject
	RuleUnknownRuntime       Rule = "unknown-runtime"
)

// ValidationError rejects an upload: Reason says what is wrong, File names the zip entry
// (empty when the whole archive is at fault) and Fix tells the user what to change.
type ValidationError struct {
	Rule   Rule
	Reason string
	File   string
	Fix    string
}

func (e *ValidationError) Error() string {
	msg := "invalid function source: " + e.Reason
	if e.File != "" {
		msg += fmt.Sprintf(" (file %q)", e.File)
	}
	if e.Fix != "" {
		msg += "; " + e.Fix
	}
	return msg
}

// StatusCode is the HTTP status an API should answer with: 413 for size caps, 400 otherwise.
func (e *ValidationError) StatusCode() int {
	switch e.Rule {
	case RuleZipTooLarge, RuleUncompressedTooLarge, RuleTooManyEntries, RuleCompressionRatio:
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusBadRequest
}

// AsValidationError returns the *ValidationError in err's chain, if any.
func AsValidationError(err error) (*ValidationError, bool) {
	var ve *ValidationError
	ok := errors.As(err, &ve)
	return ve, ok
}

// BuildError is a failed local build; Output holds the compiler or installer output the
// user needs to see.
type BuildError struct {
	Runtime string
	Step    string // e.g. "go build", "npm install"
	Output  string
	Err     error
}

func (e *BuildError) Error() string { return e.Summary() + "\n" + e.Output }

// Summary is the error without Output, for a log that has the output already (Output is a
// copy of what the build wrote to LocalBuilder.Output).
func (e *BuildError) Summary() string {
	return fmt.Sprintf("%s build failed at %s: %v", e.Runtime, e.Step, e.Err)
}

func (e *BuildError) Unwrap() error { return e.Err }
