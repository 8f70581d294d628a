package history_test

import (
	"context"
	"testing"
	"time"

	"sless.dev/sless/history"
	"sless.dev/sless/rules"
	"sless.dev/sless/rules/rulestest"
	"sless.dev/sless/test/pgtest"
	"sless.dev/sless/test/testkit"
)

// TestRolloutOutcomesBothStores runs the rollout table (rulestest/rollout.json) through both
// history stores, the ones sless dev's and the operator's rollouts read: a revision with one
// call of each row counts exactly the rows' successes and failures, and every ignored row
// (a caller that went away, a body that did not arrive, any 4xx) counts for nothing.
func TestRolloutOutcomesBothStores(t *testing.T) {
	rows := rulestest.RolloutOutcomeTable(t)
	var want history.Summary
	for _, row := range rows {
		switch row.Want {
		case rules.OutcomeFailed:
			want.Errors++
			want.Count++
		case rules.OutcomeSucceeded:
			want.Count++
		}
	}
	stores := map[string]func(t *testing.T) (history.Recorder, history.Reader, func()){
		"memory": func(*testing.T) (history.Recorder, history.Reader, func()) {
			m := history.NewMemory(0)
			return m, m, func() {}
		},
		"postgres": func(t *testing.T) (history.Recorder, history.Reader, func()) {
			p, err := history.OpenPostgres(pgtest.NewDatabase(t, "sless_history_test"), history.PostgresOptions{FlushInterval: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close(context.Background()) })
			return p, p, func() {
				testkit.WaitFor(t, "records written", 10*time.Second, func() bool { return p.Written() == uint64(len(rows)) })
			}
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			rec, rd, settle := open(t)
			start := time.Date(2026, 12, 8, 10, 0, 0, 0, time.UTC)
			for _, row := range rows {
				r := history.HTTPRecord("ns", "f", start, time.Millisecond, row.HTTPStatus, "")
				r.Revision = "f-2"
				rec.Record(r)
			}
			settle()
			got, err := rd.RevisionOutcomes(context.Background(), "ns", "f", "f-2", start)
			if err != nil || got.Count != want.Count || got.Errors != want.Errors {
				t.Fatalf("%d calls, %d failed (%v); want %d and %d", got.Count, got.Errors, err, want.Count, want.Errors)
			}
		})
	}
}
