package main

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5"

	"sless.dev/sless/test/pgtest"
)

// TestDispatcherFireExitCodes runs `sless dispatcher fire` as the CronJob does, against a real
// function server and a real PostgreSQL, and checks the exit code and the recorded row.
func TestDispatcherFireExitCodes(t *testing.T) {
	dbURL := pgtest.NewDatabase(t, "sless_dispatcher_test")
	cases := []struct {
		name     string
		status   int
		args     []string
		code     int
		recorded string // recorded status, "" = none
	}{
		{"success", http.StatusOK, nil, 0, "succeeded"},
		{"function fails", http.StatusInternalServerError, nil, dispatcherExitFailed, "failed"},
		{"bad schedule", http.StatusOK, []string{"--schedule", "every day"}, dispatcherExitConfig, ""},
		{"bad function", http.StatusOK, []string{"--function", "no-namespace"}, dispatcherExitConfig, ""},
		{"bad target", http.StatusOK, []string{"--target-url", "ftp://x"}, dispatcherExitConfig, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.WriteHeader(tc.status)
			}))
			defer srv.Close()
			fn := "f-" + hex.EncodeToString([]byte(tc.name))[:8]
			args := []string{"fire", "--function", "ns/" + fn, "--schedule", "@hourly", "--target-url", srv.URL,
				"--max-attempts", "1", "--database-url", dbURL}
			cmd := newDispatcherCmd()
			cmd.SetArgs(append(args, tc.args...))
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			err := cmd.ExecuteContext(context.Background())
			code := 0
			if err != nil {
				code = exitCode(err)
			}
			if code != tc.code {
				t.Fatalf("exit code %d (%v), want %d", code, err, tc.code)
			}
			var status string
			conn, err := pgx.Connect(context.Background(), dbURL)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			err = conn.QueryRow(context.Background(), "SELECT status FROM invocations WHERE function = $1 AND kind = 'cron'", fn).Scan(&status)
			if tc.recorded == "" && err == nil || tc.recorded != "" && status != tc.recorded {
				t.Fatalf("recorded status %q (%v), want %q", status, err, tc.recorded)
			}
		})
	}
}

// TestDispatcherFireFromEnv configures fire mode only through SLESS_* variables, as a
// CronJob pod with env from a Secret would.
func TestDispatcherFireFromEnv(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-Sless-Trigger-Kind") != "cron" {
			w.WriteHeader(http.StatusBadRequest)
		}
	}))
	defer srv.Close()
	t.Setenv("SLESS_FUNCTION", "ns/from-env")
	t.Setenv("SLESS_SCHEDULE", "*/10 * * * *")
	t.Setenv("SLESS_TARGET_URL", srv.URL)
	t.Setenv("SLESS_MAX_ATTEMPTS", "1")
	cmd := newDispatcherCmd()
	cmd.SetArgs([]string{"fire"})
	cmd.SetErr(io.Discard)
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("fire configured from env: %v", err)
	}
	t.Setenv("SLESS_MAX_ATTEMPTS", "three")
	cmd = newDispatcherCmd()
	cmd.SetArgs([]string{"fire"})
	cmd.SetErr(io.Discard)
	if err := cmd.ExecuteContext(context.Background()); err == nil || exitCode(err) != dispatcherExitConfig {
		t.Fatalf("invalid SLESS_MAX_ATTEMPTS: err %v, want exit code %d", err, dispatcherExitConfig)
	}
}
