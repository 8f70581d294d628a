package testkit

import (
	"bytes"
	"testing"

	"github.com/spf13/cobra"
)

// RunCommand runs the command mk makes with args, as a user's shell would, and returns what
// it printed (stdout and stderr together) and its error.
func RunCommand(t *testing.T, mk func() *cobra.Command, args ...string) (string, error) {
	t.Helper()
	cmd := mk()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(t.Context())
	return out.String(), err
}
