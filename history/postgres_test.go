package history

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"sless.dev/sless/test/pgtest"
	"sless.dev/sless/test/testkit"
)

func openTestStore(t *testing.T, dsn string, opts PostgresOptions) *Postgres {
	t.Helper()
	p, err := OpenPostgres(dsn, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

func TestPostgresWritesEveryRecord(t *testing.T) {
	dsn := newDatabase(t)
	p := openTestStore(t, dsn, PostgresOptions{BatchSize: 100})
	const n = 3000
	start := time.Now()
	for i := range n {
		p.Record(Record{Namespace: "ns", Function: fmt.Sprintf("f%d", i%3), Kind: KindEvent, Start: start,
			Duration: time.Millisecond, Status: StatusSucceeded, HTTPStatus: 200})
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := pgtest.CountInvocations(t, dsn, ""); got != n {
		t.Fatalf("rows = %d, want %d (dropped %d)", got, n, p.Dropped())
	}
	if p.Written() != n || p.Dropped() != 0 {
		t.Fatalf("written %d dropped %d, want %d and 0", p.Written(), p.Dropped(), n)
	}
}

func TestPostgresStoresHostileText(t *testing.T) {
	dsn := newDatabase(t)
	p := openTestStore(t, dsn, PostgresOptions{})
	p.Record(Record{Namespace: "ns", Function: "f", Kind: KindHTTP, Start: time.Now(), Status: StatusFailed,
		Error: "nul\x00 and invalid \xff utf-8 " + string(make([]byte, 10*maxErrorLen))})
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p.Dropped() != 0 || pgtest.CountInvocations(t, dsn, "WHERE length(error) <= $1", maxErrorLen) != 1 {
		t.Fatalf("hostile record not stored cleaned: dropped %d", p.Dropped())
	}
}

func TestMigrateConcurrentStarts(t *testing.T) {
	dsn := newDatabase(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		p := openTestStore(t, dsn, PostgresOptions{})
		wg.Go(func() { errs[i] = p.Migrate(context.Background()) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var n int
	if err := c.QueryRow(context.Background(), "SELECT count(*) FROM history_schema_migrations").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if want := len(must(loadMigrations())); n != want {
		t.Fatalf("history_schema_migrations rows = %d, want %d", n, want)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestPostgresOutage cuts the network between the writer and PostgreSQL: Record must stay
// non-blocking, drops are counted, and writes resume once the path is restored.
func TestPostgresOutage(t *testing.T) {
	dsn := newDatabase(t)
	proxy := testkit.NewLink(t, pgtest.Addr(t))
	p := openTestStore(t, pgtest.Via(t, dsn, proxy.Addr()), PostgresOptions{BufferSize: 256, BatchSize: 50, FlushInterval: 20 * time.Millisecond, WriteTimeout: time.Second})
	rec := func(fn string, n int) time.Duration {
		var worst time.Duration
		for range n {
			t0 := time.Now()
			p.Record(Record{Namespace: "ns", Function: fn, Kind: KindHTTP, Start: t0, Status: StatusSucceeded})
			worst = max(worst, time.Since(t0))
		}
		return worst
	}
	rec("before", 100)
	testkit.WaitFor(t, "100 records written before the outage", 10*time.Second, func() bool { return p.Written() == 100 })

	proxy.Cut()
	// A Record that waited on the stuck writer would take the write timeout (1 s); the bound
	// sits well under it and well over what a loaded machine's scheduler can add to a call.
	if worst := rec("during", 20000); worst > 500*time.Millisecond {
		t.Fatalf("Record blocked for %s during the outage", worst)
	}
	testkit.WaitFor(t, "drops counted during the outage", 10*time.Second, func() bool { return p.Dropped() > 0 })

	proxy.Restore(t)
	time.Sleep(maxRetryDelay) // let the writer finish the batches it took during the outage
	written := p.Written()
	rec("after", 100)
	testkit.WaitFor(t, "records after the outage written", 20*time.Second, func() bool { return p.Written() >= written+100 })
	if got := pgtest.CountInvocations(t, dsn, "WHERE function = 'after'"); got != 100 {
		t.Fatalf("rows after recovery = %d, want 100", got)
	}
	if p.Written()+p.Dropped() != 20200 {
		t.Fatalf("written %d + dropped %d != 20200 recorded: a record vanished uncounted", p.Written(), p.Dropped())
	}
}

// TestPostgresSlowMigration: the first write migrates, and a migration slower than a COPY's
// write timeout and its retries (a loaded machine; here another gateway holding the
// migration lock for 5 s) delays the first batch but loses none of it.
func TestPostgresSlowMigration(t *testing.T) {
	dsn := newDatabase(t)
	ctx := context.Background()
	other, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrationLockKey); err != nil {
		t.Fatal(err)
	}
	p := openTestStore(t, dsn, PostgresOptions{FlushInterval: 10 * time.Millisecond, WriteTimeout: time.Second})
	for range 10 {
		p.Record(Record{Namespace: "ns", Function: "first", Kind: KindHTTP, Start: time.Now(), Status: StatusSucceeded})
	}
	time.Sleep(5 * time.Second)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the first batch written", 20*time.Second, func() bool { return p.Written() == 10 })
	if p.Dropped() != 0 {
		t.Fatalf("%d records dropped while the migration waited", p.Dropped())
	}
}

// TestPostgresStartsWithDatabaseDown: a store opened while PostgreSQL is unreachable serves
// Record at once, and migrates and writes once the database appears.
func TestPostgresStartsWithDatabaseDown(t *testing.T) {
	dsn := newDatabase(t)
	proxy := testkit.NewLink(t, pgtest.Addr(t))
	url := pgtest.Via(t, dsn, proxy.Addr())
	proxy.Cut()
	p := openTestStore(t, url, PostgresOptions{FlushInterval: 10 * time.Millisecond, WriteTimeout: time.Second})
	p.Record(Record{Namespace: "ns", Function: "early", Kind: KindJob, Start: time.Now(), Status: StatusSucceeded})
	testkit.WaitFor(t, "the early record dropped while the database is down", 10*time.Second, func() bool { return p.Dropped() == 1 })
	if err := p.Migrate(context.Background()); err == nil {
		t.Fatal("Migrate succeeded without a database")
	}
	proxy.Restore(t)
	p.Record(Record{Namespace: "ns", Function: "late", Kind: KindJob, Start: time.Now(), Status: StatusSucceeded})
	testkit.WaitFor(t, "the late record written", 20*time.Second, func() bool { return p.Written() == 1 })
	pg, err := p.List(context.Background(), Query{Namespace: "ns"})
	if err != nil || len(pg.Records) != 1 || pg.Records[0].Function != "late" || pg.Records[0].Kind != KindJob {
		t.Fatalf("List = %+v, %v; want the late job record", pg, err)
	}
}

// TestPostgresFullWait: with FullWait a burst larger than the buffer waits for the writer
// while the database takes writes, so nothing is dropped; once writes fail, a full buffer
// drops at once again (an outage never holds the caller).
func TestPostgresFullWait(t *testing.T) {
	dsn := newDatabase(t)
	proxy := testkit.NewLink(t, pgtest.Addr(t))
	p := openTestStore(t, pgtest.Via(t, dsn, proxy.Addr()), PostgresOptions{BufferSize: 16, BatchSize: 8, FlushInterval: 5 * time.Millisecond,
		WriteTimeout: 2 * time.Second, FullWait: 2 * time.Second})
	// Migrated first, and a write bound no loaded machine reaches while the database is up:
	// one timed-out write counts as an outage, and the outage's drops are the next half.
	if err := p.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 2000 {
		p.Record(Record{Namespace: "ns", Function: "burst", Kind: KindEvent, Start: time.Now(), Status: StatusSucceeded})
	}
	testkit.WaitFor(t, "the burst written", 20*time.Second, func() bool { return p.Written() == 2000 })
	if p.Dropped() != 0 {
		t.Fatalf("%d records of a burst dropped while the database took writes", p.Dropped())
	}
	proxy.Cut()
	testkit.WaitFor(t, "the writer to see the outage", 20*time.Second, func() bool {
		p.Record(Record{Namespace: "ns", Function: "during", Kind: KindEvent, Start: time.Now(), Status: StatusSucceeded})
		return p.Dropped() > 0
	})
	var worst time.Duration
	for range 200 {
		t0 := time.Now()
		p.Record(Record{Namespace: "ns", Function: "during", Kind: KindEvent, Start: t0, Status: StatusSucceeded})
		worst = max(worst, time.Since(t0))
	}
	if worst > 500*time.Millisecond {
		t.Fatalf("Record waited %s with the database failing", worst)
	}
	proxy.Restore(t)
}
