package history

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"sless.dev/sless/test/pgtest"
)

// BenchmarkUsageMonth: a tenant's month of usage for 1,000 functions (720,000 hourly rollups,
// 14 invocations each: 10 million invocations) read from PostgreSQL by hour, day and
// function, against the baseline of one sum over the same rows (the scan every grouping must
// do). docs/benchmarks.md publishes the figures.
//
//	go test -run '^$' -bench BenchmarkUsageMonth -benchtime 20x ./history/
func BenchmarkUsageMonth(b *testing.B) {
	const functions, hours = 1000, 720
	dsn := pgtest.NewDatabase(b, "sless_history_bench")
	p, err := OpenPostgres(dsn, PostgresOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(context.Background())
	ctx := context.Background()
	if err := p.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	end := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	start := end.Add(-hours * time.Hour)
	// The rollups go in through the writers' own upsert, a day of every function at a time.
	for h := 0; h < hours; h += 24 {
		usage := map[usageKey]Usage{}
		for f := range functions {
			for i := range 24 {
				k := usageKey{namespace: "tenant", function: fmt.Sprintf("fn-%04d", f), hour: start.Add(time.Duration(h+i) * time.Hour).Unix()}
				usage[k] = Usage{Invocations: 14, Errors: 1, ColdStarts: 1, DurationUS: 14_000, MBMillis: 14 * 128, BytesOut: 14 << 10}
			}
		}
		if err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error { return upsertUsage(ctx, tx, usage) }); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := p.pool.Exec(ctx, "ANALYZE usage_hourly"); err != nil {
		b.Fatal(err)
	}
	b.Run("baseline: one sum of the month's rows", func(b *testing.B) {
		for b.Loop() {
			var n int64
			if err := p.pool.QueryRow(ctx, `SELECT sum(invocations)::bigint FROM usage_hourly WHERE namespace = $1 AND hour >= $2 AND hour < $3`,
				"tenant", start, end).Scan(&n); err != nil || n != functions*hours*14 {
				b.Fatalf("sum %d, %v", n, err)
			}
		}
	})
	for _, by := range UsageBys {
		b.Run("by "+string(by), func(b *testing.B) {
			for b.Loop() {
				r, err := p.Usage(ctx, UsageQuery{Namespace: "tenant", From: start, To: end, By: by, Now: end})
				if err != nil || r.Total.Invocations != functions*hours*14 {
					b.Fatalf("total %d, %v", r.Total.Invocations, err)
				}
			}
		})
	}
}
