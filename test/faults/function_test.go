//go:build faults

package faults

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/test/testkit"
)

// ledgerRuntime is the runtime of the function every scenario invokes.
const ledgerRuntime = "go1.25"

// ledgerHandler appends the event's id and the time to the file named by FAULTS_LEDGER
// before it answers, in one write per line (O_APPEND keeps the lines of concurrent
// processes whole), so every line is one invocation that ran.
const ledgerHandler = `package handler

import (
	"fmt"
	"os"
	"time"
)

var ledger, ledgerErr = os.OpenFile(os.Getenv("FAULTS_LEDGER"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)

func Handle(event map[string]interface{}) interface{} {
	if ledgerErr != nil {
		panic(ledgerErr)
	}
	if _, err := fmt.Fprintf(ledger, "%v %d\n", event["id"], time.Now().UnixNano()); err != nil {
		panic(err)
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
func startFunction(t *testing.T, name, ledger string) string {
	t.Helper()
	addr := testkit.FreeAddr(t)
	_, port, _ := strings.Cut(addr, ":")
	p := startProcT(t, procSpec{name: name, argv: s.fn.Command, dir: s.fn.Dir,
		env: append(append([]string{}, s.fn.Env...), "PORT="+port, "SLESS_HOST=127.0.0.1", "FAULTS_LEDGER="+ledger)})
	url := "http://" + addr
	if err := until(30*time.Second, p, func() bool { return healthy(url + "/healthz") }); err != nil {
		t.Fatalf("function %s: %v", name, err)
	}
	return url
}

// ledger is what the function recorded: every run of every id.
type ledger map[string][]time.Time

func readLedger(t *testing.T, path string) ledger {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatalf("read the ledger: %v", err)
	}
	data = data[:bytes.LastIndexByte(data, '\n')+1] // a line still being appended is read next time
	l := ledger{}
	for line := range bytes.Lines(data) {
		id, ns, ok := strings.Cut(strings.TrimSuffix(string(line), "\n"), " ")
		at, err := strconv.ParseInt(ns, 10, 64)
		if !ok || err != nil {
			t.Fatalf("ledger %s: malformed line %q", path, line)
		}
		l[id] = append(l[id], time.Unix(0, at))
	}
	return l
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
func waitLedger(t *testing.T, path, prefix string, n int, after time.Time, timeout time.Duration) tally {
	t.Helper()
	var c tally
	err := until(timeout, nil, func() bool {
		c = readLedger(t, path).count(prefix, n, after)
		return c.distinct == n
	})
	if err != nil {
		t.Errorf("%d of %d %s messages never reached the function (%v)", n-c.distinct, n, prefix, err)
	}
	return c
}
