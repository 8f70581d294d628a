// Package pgtest gives tests their own database on the real PostgreSQL: created with a unique
// name, dropped (with FORCE, so open pools do not block it) when the test ends.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
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
