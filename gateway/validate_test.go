package gateway

import (
	"errors"
	"strings"
	"testing"

	"sless.dev/sless/buildkit"
)

// TestValidEntrypointSaysTheRuntimesForm: create and update refuse an entrypoint with the
// message the upload gives (buildkit's, naming the runtime's form), never a suggestion of
// another runtime's form.
func TestValidEntrypointSaysTheRuntimesForm(t *testing.T) {
	for _, tc := range []struct {
		runtime, ep, want string
	}{
		{"go1.25", "Handle()", "such as Handle"},
		{"go1.23", "handler.Handle(event)", "such as Handle"},
		{"go1.25", "main.Handle", "such as Handle"},
		{"go1.25", strings.Repeat("H", 254), "such as Handle"},
		{"python3.11", "handler.handle()", "such as handler.handle"},
		{"python3.12", "handler", "such as handler.handle"},
		{"nodejs20", "handler.handle;x", "such as handler.handle or src/index.handle"},
		{"nodejs22", "1index.handle", "such as handler.handle or src/index.handle"},
	} {
		spec := defaultFunctionSpec()
		spec.Runtime, spec.Entrypoint = tc.runtime, tc.ep
		err := validateFunctionSpec(spec)
		var ie *InvalidError
		if !errors.As(err, &ie) || ie.Field != "entrypoint" {
			t.Errorf("%s %q: %v, want an invalid entrypoint", tc.runtime, tc.ep, err)
			continue
		}
		_, upload := buildkit.ValidateBytes(t.Context(), nil, tc.runtime, tc.ep, buildkit.Limits{})
		if upload == nil || ie.Reason != upload.Error() || !strings.Contains(ie.Reason, tc.want) {
			t.Errorf("%s %q: create says %q, the upload %v; want the same, with %q", tc.runtime, tc.ep, ie.Reason, upload, tc.want)
		}
	}
}
