//go:build faults

package faults

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/rules"
	"sless.dev/sless/test/testkit"
)

// ledgerRuntime is the runtime of the function every scenario invokes.
const ledgerRuntime = "go1.25"

// ledgerHandler reports the event's id to the ledger at FAULTS_LEDGER (the suite's HTTP
// server) before it answers, so every recorded id is one invocation that ran. Over HTTP, not
// a file: sless dev's sandbox shows a function no host path, and the suite's process is the
// one that is never killed.
const ledgerHandler = `package handler

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
)

var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

func Handle(event map[string]interface{}) interface{} {
	resp, err := client.Post(os.Getenv("FAULTS_LEDGER")+"?id="+url.QueryEscape(fmt.Sprint(event["id"])), "text/plain", nil)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		panic("the ledger answered " + resp.Status)
	}
	return "ok"
}
`

func ledgerZip() ([]byte, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.Create("handler.go")
	if err == nil {
		_, err = w.Write([]byte(ledgerHandler))
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("zip the ledger function: %w", err)
	}
	return buf.Bytes(), nil
}

// buildLedger builds the function the way sless dev does, for the scenarios that run its
// wrapper process themselves (behind the dispatcher, and as the gateway's upstream).
func buildLedger(dir string) (*buildkit.Artifact, error) {
	ctx := context.Background()
	data, err := ledgerZip()
	if err != nil {
		return nil, err
	}
	src, err := buildkit.ValidateBytes(ctx, data, ledgerRuntime, "", buildkit.DefaultLimits())
	if err != nil {
		return nil, err
	}
	bc, err := buildkit.NewBuildContext(ctx, src)
	if err != nil {
		return nil, err
	}
	quiet := buildkit.LocalBuilder{Logger: slog.New(slog.DiscardHandler)} // the suite reports the step
	return quiet.Build(ctx, bc.Data, ledgerRuntime, filepath.Join(dir, "ledger-build"))
}

// startFunction runs the ledger function's wrapper on a free port, recording into ledger, and
// returns its base URL once it is ready.
func startFunction(t *testing.T, name string, ledger *ledgerServer) string {
	t.Helper()
	addr := testkit.FreeAddr(t)
	_, port, _ := strings.Cut(addr, ":")
	p := startProcT(t, procSpec{name: name, argv: s.fn.Command, dir: s.fn.Dir,
		env: append(append([]string{}, s.fn.Env...), "PORT="+port, "SLESS_HOST=127.0.0.1", "FAULTS_LEDGER="+ledger.URL,
			rules.EnvIdentityKey+"="+hex.EncodeToString(rules.FunctionKey(faultsMaster, dispatcherNamespace, "ledger")))})
	url := "http://" + addr
	if err := until(30*time.Second, p, func() bool { return healthy(url + "/healthz") }); err != nil {
		t.Fatalf("function %s: %v", name, err)
	}
	return url
}

// ledger is what the function recorded: every run of every id.
type ledger map[string][]time.Time

// ledgerServer records each id the function reports, with the time it arrived.
type ledgerServer struct {
	URL  string
	mu   sync.Mutex
	runs ledger
}

func newLedger(t *testing.T) *ledgerServer {
	l := &ledgerServer{runs: ledger{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("id")
		if r.Method != http.MethodPost || id == "" {
			http.Error(w, "POST ?id=<invocation id>", http.StatusBadRequest)
			return
		}
		l.mu.Lock()
		l.runs[id] = append(l.runs[id], time.Now())
		l.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	l.URL = srv.URL
	return l
}

// readLedger is a copy of what l has recorded so far.
func readLedger(t *testing.T, l *ledgerServer) ledger {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	c := make(ledger, len(l.runs))
	for id, runs := range l.runs {
		c[id] = slices.Clone(runs)
	}
	return c
}

// tally counts the runs of the n ids prefix-0 … prefix-(n-1).
type tally struct {
	runs, distinct int
	first          time.Time // earliest run at or after the moment passed to count
}

func (l ledger) count(prefix string, n int, after time.Time) tally {
	var c tally
	for i := range n {
		runs := l[invocationID(prefix, i)]
		c.runs += len(runs)
		if len(runs) > 0 {
			c.distinct++
		}
		for _, at := range runs {
			if !at.Before(after) && (c.first.IsZero() || at.Before(c.first)) {
				c.first = at
			}
		}
	}
	return c
}

func (c tally) duplicates() int { return c.runs - c.distinct }

// ranBetween counts the runs of ids of prefix ("": any) between from and to.
func (l ledger) ranBetween(prefix string, from, to time.Time) int {
	n := 0
	for id, runs := range l {
		if prefix != "" && !strings.HasPrefix(id, prefix+"-") {
			continue
		}
		for _, at := range runs {
			if at.After(from) && at.Before(to) {
				n++
			}
		}
	}
	return n
}

// waitLedger waits until all n ids of prefix ran at least once, and returns the tally.
func waitLedger(t *testing.T, l *ledgerServer, prefix string, n int, after time.Time, timeout time.Duration) tally {
	t.Helper()
	var c tally
	err := until(timeout, nil, func() bool {
		c = readLedger(t, l).count(prefix, n, after)
		return c.distinct == n
	})
	if err != nil {
		t.Errorf("%d of %d %s messages never reached the function (%v)", n-c.distinct, n, prefix, err)
	}
	return c
}
