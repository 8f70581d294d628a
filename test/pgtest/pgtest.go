// Package pgtest gives tests their own database on the real PostgreSQL: created with a unique
// name, dropped (with FORCE, so open pools do not block it) when the test ends. Under -short
// (make test-unit) NewDatabase and Addr skip the test instead of dialing the server.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"sless.dev/sless/test/testkit"
)

// URL is the server tests use: $SLESS_TEST_POSTGRES_URL, or the machine's PostgreSQL.
func URL() string {
	if u := os.Getenv("SLESS_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// NewDatabase creates a database named prefix_<random> and returns its URL.
func NewDatabase(t testing.TB, prefix string) string {
	t.Helper()
	testkit.NeedsHeavy(t, "PostgreSQL")
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := prefix + "_" + hex.EncodeToString(b)
	if err := exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("create database %s on %s (set SLESS_TEST_POSTGRES_URL): %v", name, URL(), err)
	}
	t.Cleanup(func() {
		if err := exec("DROP DATABASE " + name + " WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(URL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

func exec(sql string) error {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, URL())
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, sql)
	return err
}

// Addr is the host:port of the server tests use.
func Addr(t testing.TB) string {
	t.Helper()
	testkit.NeedsHeavy(t, "PostgreSQL")
	u, err := url.Parse(URL())
	if err != nil {
		t.Fatalf("SLESS_TEST_POSTGRES_URL: %v", err)
	}
	return u.Host
}

// Via is dsn with its host and port replaced by addr (e.g. a testkit.Link to the server).
func Via(t testing.TB, dsn, addr string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	return u.String()
}

// CountInvocations counts the rows of the history table invocations of dsn's database matching where (e.g. "WHERE
// namespace = $1"); 0 before the history store created its table.
func CountInvocations(t testing.TB, dsn, where string, args ...any) int {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int
	err = c.QueryRow(ctx, "SELECT count(*) FROM invocations "+where, args...).Scan(&n)
	if err != nil && !strings.Contains(err.Error(), "does not exist") {
		t.Fatal(err)
	}
	return n
}
