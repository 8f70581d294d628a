//go:build faults

package faults

import (
	"fmt"
	"io"
	"strconv"
	"sync"
	"testing"
	"time"
)

// row is one load of one scenario in the published table.
type row struct {
	scenario, load string
	sent, done     int
	retried        string // HTTP: invocations that needed a retry / failed attempts
	lost, dups     int
	// history: succeeded records written vs invocations that ran (ledger lines)
	written, expected int
	recovery          time.Duration // fault → first invocation that ran once it was over
}

// fault is when a scenario broke something and when the broken part was back (restarted,
// or up again): runs from then on are the recovered path's, not in-flight work finishing.
type fault struct{ at, over time.Time }

func (f fault) recovery(c tally) time.Duration {
	if c.first.IsZero() {
		return 0
	}
	return c.first.Sub(f.at)
}

// load kinds of the table.
const (
	loadHTTP       = "HTTP /fn/"
	loadTrigger    = "AMQP, event trigger"
	loadDispatcher = "AMQP, sless dispatcher"
)

// httpRow reports an HTTP load from its callers' view and the function's ledger.
func httpRow(scenario string, l *httpLoad, c tally, written int, f fault) row {
	return row{scenario: scenario, load: loadHTTP, sent: l.n, done: c.distinct,
		retried: fmt.Sprintf("%d / %d", l.retried.Load(), l.failedAttempts.Load()),
		lost:    int(l.gaveUp.Load()), dups: c.duplicates(), written: written, expected: c.runs, recovery: f.recovery(c)}
}

// amqpRow reports n published messages from the function's ledger.
func amqpRow(scenario, load string, n int, c tally, written int, f fault) row {
	return row{scenario: scenario, load: load, sent: n, done: c.distinct, retried: "–",
		lost: n - c.distinct, dups: c.duplicates(), written: written, expected: c.runs, recovery: f.recovery(c)}
}

// results collects the rows of every scenario for the summary printed at the end.
type results struct {
	mu   sync.Mutex
	rows []row
}

func (r *results) add(t *testing.T, rows ...row) {
	r.mu.Lock()
	r.rows = append(r.rows, rows...)
	r.mu.Unlock()
	for _, x := range rows {
		t.Logf("%s | %s: sent %d, done %d, retried/failed %s, lost %d, duplicates %d, history %d of %d, recovery %s",
			x.scenario, x.load, x.sent, x.done, x.retried, x.lost, x.dups, x.written, x.expected, x.recovery.Round(time.Millisecond))
	}
}

// markdown writes the table docs/reliability.md publishes.
func (r *results) markdown(w io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintln(w, "| scenario | load | sent | done | retried / failed attempts | lost | duplicates | history written / ran (lost) | recovery |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, x := range r.rows {
		recovery := "–"
		if x.recovery > 0 {
			recovery = x.recovery.Round(10 * time.Millisecond).String()
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | **%d** | %s | %s / %s (%s) | %s |\n", x.scenario, x.load,
			thousands(x.sent), thousands(x.done), x.retried, x.lost, thousands(x.dups),
			thousands(x.written), thousands(x.expected), thousands(x.expected-x.written), recovery)
	}
}

// thousands writes n with comma separators, as the docs do.
func thousands(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
