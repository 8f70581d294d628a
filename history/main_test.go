package history

import (
	"testing"

	"sless.dev/sless/test/pgtest"
)

// newDatabase gives the test its own database on the real PostgreSQL.
func newDatabase(t *testing.T) string { return pgtest.NewDatabase(t, "sless_history_test") }
