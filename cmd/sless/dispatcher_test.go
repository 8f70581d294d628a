package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sless.dev/sless/cmd/sless/cli"
	"sless.dev/sless/rules"
	"sless.dev/sless/test/pgtest"
	"sless.dev/sless/test/testenv"
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
				code = cli.ExitCode(err)
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
// CronJob pod with env from a Secret would: its calls are signed with the function's key,
// given itself (SLESS_IDENTITY_KEY, the tenant namespace's dispatchers) or derived from the
// master (SLESS_IDENTITY_MASTER, the platform namespace's).
func TestDispatcherFireFromEnv(t *testing.T) {
	master := bytes.Repeat([]byte{7}, rules.IdentityMasterBytes)
	key := rules.FunctionKey(master, "ns", "from-env")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		sig := r.Header.Get(rules.HeaderSignature)
		ts, _ := strconv.ParseInt(strings.TrimPrefix(strings.Split(sig, ",")[0], "t="), 10, 64)
		switch {
		case r.Header.Get("X-Sless-Trigger-Kind") != "cron":
			w.WriteHeader(http.StatusBadRequest)
		case sig != rules.Signature(key, ts, r.Method, rules.SignaturePath(r.URL), r.Header):
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	defer srv.Close()
	t.Setenv("SLESS_FUNCTION", "ns/from-env")
	t.Setenv("SLESS_SCHEDULE", "*/10 * * * *")
	t.Setenv("SLESS_TARGET_URL", srv.URL)
	t.Setenv("SLESS_MAX_ATTEMPTS", "1")
	fire := func() error {
		cmd := newDispatcherCmd()
		cmd.SetArgs([]string{"fire"})
		cmd.SetErr(io.Discard)
		return cmd.ExecuteContext(context.Background())
	}
	if err := fire(); err == nil || cli.ExitCode(err) != dispatcherExitFailed {
		t.Fatalf("fire without a key: %v, want the function's refusal (exit code %d)", err, dispatcherExitFailed)
	}
	t.Setenv("SLESS_IDENTITY_MASTER", hex.EncodeToString(master))
	if err := fire(); err != nil {
		t.Fatalf("fire configured from env, key derived from the master: %v", err)
	}
	t.Setenv("SLESS_IDENTITY_MASTER", "")
	t.Setenv("SLESS_IDENTITY_KEY", hex.EncodeToString(key))
	if err := fire(); err != nil {
		t.Fatalf("fire configured from env, the function's key: %v", err)
	}
	for env, value := range map[string]string{"SLESS_MAX_ATTEMPTS": "three", "SLESS_IDENTITY_KEY": "abc"} {
		t.Setenv(env, value)
		if err := fire(); err == nil || cli.ExitCode(err) != dispatcherExitConfig {
			t.Fatalf("invalid %s: err %v, want exit code %d", env, err, dispatcherExitConfig)
		}
	}
}

// TestDispatcherMasksWhatItLogs runs `sless dispatcher fire --mask-secrets` as a cluster's
// CronJob pod does, reading the secret through a real API server, against a function that
// fails with the secret's value in its answer: the value is in none of the dispatcher's log
// lines (the retry's warning quotes the error) or the history's rows, before and after a
// rotation. (Its spans record the same masked error; the SDK's global tracer keeps the
// first provider a process sets, so a test process that ran another command sees none.)
func TestDispatcherMasksWhatItLogs(t *testing.T) {
	env := testenv.ForTest(t)
	dbURL := pgtest.NewDatabase(t, "sless_dispatcher_mask_test")
	ctx := context.Background()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := testenv.WriteKubeconfig(env.Config, kubeconfig); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kubeconfig)
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}); err != nil {
		t.Fatal(err)
	}
	values := []string{"disp-value-27c4-first", "disp-value-e5a9-second"}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "tenant", Labels: map[string]string{rules.SecretLabel: "true"}},
		StringData: map[string]string{"password": values[0]}}
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	var current atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		http.Error(w, "cannot log in with "+current.Load().(string), http.StatusInternalServerError)
	}))
	defer srv.Close()
	var logs bytes.Buffer
	for i, v := range values {
		if i > 0 {
			secret.StringData = map[string]string{"password": v}
			if err := env.Client.Update(ctx, secret); err != nil {
				t.Fatal(err)
			}
		}
		current.Store(v)
		cmd := newDispatcherCmd()
		cmd.SetArgs([]string{"fire", "--function", "tenant/fn", "--schedule", "@hourly", "--target-url", srv.URL, "--max-attempts", "2",
			"--backoff", "10ms", "--mask-secrets", "db", "--database-url", dbURL})
		cmd.SetOut(io.Discard)
		cmd.SetErr(&logs)
		if err := cmd.ExecuteContext(ctx); err == nil || cli.ExitCode(err) != dispatcherExitFailed {
			t.Fatalf("fire %d: %v, want the function's failure", i, err)
		}
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var rows []string
	r, err := conn.Query(ctx, "SELECT error FROM invocations WHERE function = 'fn'")
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		var e string
		if err := r.Scan(&e); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, e)
	}
	if len(rows) != 4 || !strings.Contains(rows[0], "cannot log in with "+rules.SecretMask) {
		t.Errorf("history errors %q, want four with the value masked", rows)
	}
	if !strings.Contains(logs.String(), "cannot log in with "+rules.SecretMask) {
		t.Errorf("the retry's warning does not quote the masked error:\n%s", logs.String())
	}
	for sink, text := range map[string]string{"log": logs.String(), "history": strings.Join(rows, "\n")} {
		for _, v := range values {
			if strings.Contains(text, v) {
				t.Errorf("the dispatcher's %s holds a value:\n%s", sink, text)
			}
		}
	}
}
