package history

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"sless.dev/sless/test/pgtest"
)

// newDatabase gives the test its own database on the real PostgreSQL.
func newDatabase(t *testing.T) string { return pgtest.NewDatabase(t, "sless_history_test") }

func countRows(t *testing.T, dsn, where string, args ...any) int {
	t.Helper()
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var n int
	if err := c.QueryRow(context.Background(), "SELECT count(*) FROM invocations "+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
