package history

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"k8s.io/apimachinery/pkg/util/wait"
)

// PostgresOptions tunes the asynchronous writer. Zero values take the documented defaults.
type PostgresOptions struct {
	// BufferSize bounds the records waiting to be written; beyond it Record drops. Default 8192.
	BufferSize int
	// FullWait, when set, is how long Record waits for room in a full buffer while the
	// database takes writes (a burst the writer is catching up with) before it drops; with
	// the database failing it drops at once. 0: never waits (the gateway's request path).
	FullWait time.Duration
	// BatchSize is the most records written by one COPY. Default 500.
	BatchSize int
	// FlushInterval is the longest a record waits for its batch to fill. Default 200ms.
	FlushInterval time.Duration
	// WriteTimeout bounds one COPY (and the connect it may need). Default 5s.
	WriteTimeout time.Duration
	// Logger gets rate-limited drop and write-failure warnings. Default slog.Default().
	Logger *slog.Logger
}

func (o PostgresOptions) withDefaults() PostgresOptions {
	if o.BufferSize <= 0 {
		o.BufferSize = 8192
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 500
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = 200 * time.Millisecond
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

const (
	// batchAttempts is how often one batch is tried before it is dropped, so an outage costs
	// bounded memory and the writer keeps draining the buffer.
	batchAttempts = 3
	maxRetryDelay = 5 * time.Second
	logEvery      = 10 * time.Second
)

// retryBackoff spaces the writes of a batch while they fail: 200 ms, doubling up to
// maxRetryDelay over consecutive failures, from the start again after a write that worked.
var retryBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Cap: maxRetryDelay, Steps: math.MaxInt32}

// Drop reasons, the "reason" attribute of the dropped-records metric.
const (
	dropBufferFull  = "buffer_full"
	dropWriteFailed = "write_failed"
	dropClosed      = "closed"
)

// Postgres stores records in PostgreSQL through a batched asynchronous writer fed by a bounded
// buffer. Migrations are applied before the first write or read (and by Migrate).
type Postgres struct {
	pool *pgxpool.Pool
	opts PostgresOptions
	log  *slog.Logger

	mu     sync.RWMutex // Record holds it shared; Close exclusively, so no send races the final drain
	closed bool
	buf    chan Record
	quit   chan struct{}
	done   chan struct{}

	migrateMu sync.Mutex
	migrated  atomic.Bool
	// failing is set while the last write failed: a full buffer then drops at once.
	failing atomic.Bool

	dropped, written atomic.Uint64
	droppedMetric    metric.Int64Counter
	writtenMetric    metric.Int64Counter
	dropLog, failLog rateLimit
}

var (
	_ Recorder = (*Postgres)(nil)
	_ Reader   = (*Postgres)(nil)
)

// OpenPostgres starts a store for the database at dsn (a libpq URL or key=value string). It
// does not wait for the database: the writer connects, migrates and reconnects by itself, so
// an unreachable database never stops the caller from serving. Call Migrate to fail fast.
func OpenPostgres(dsn string, opts PostgresOptions) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("invalid history database URL: %w", err)
	}
	opts = opts.withDefaults()
	if cfg.ConnConfig.ConnectTimeout == 0 || cfg.ConnConfig.ConnectTimeout > opts.WriteTimeout {
		cfg.ConnConfig.ConnectTimeout = opts.WriteTimeout
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("create history database pool: %w", err)
	}
	meter := otel.Meter("sless.dev/sless/history")
	p := &Postgres{
		pool: pool,
		opts: opts,
		log:  opts.Logger.With("component", "history"),
		buf:  make(chan Record, opts.BufferSize),
		quit: make(chan struct{}),
		done: make(chan struct{}),
	}
	p.droppedMetric, _ = meter.Int64Counter("sless.history.records.dropped",
		metric.WithDescription("Invocation records dropped because the buffer was full or the database failed"))
	p.writtenMetric, _ = meter.Int64Counter("sless.history.records.written",
		metric.WithDescription("Invocation records written to PostgreSQL"))
	go p.run()
	return p, nil
}

// MigrateTimeout bounds applying the migrations, a few DDL statements that take seconds
// on a loaded machine: not a COPY's WriteTimeout, which would drop the first batches there.
const MigrateTimeout = 15 * time.Second

// Migrate applies the embedded schema migrations once per store.
func (p *Postgres) Migrate(ctx context.Context) error {
	if p.migrated.Load() {
		return nil
	}
	p.migrateMu.Lock()
	defer p.migrateMu.Unlock()
	if p.migrated.Load() {
		return nil
	}
	if err := migrate(ctx, p.pool); err != nil {
		return fmt.Errorf("migrate history database: %w", err)
	}
	p.migrated.Store(true)
	return nil
}

// Record queues r for the writer, or drops and counts it when the buffer is full or the store
// is closed. It blocks only with FullWait, at most that long, while the writer succeeds.
func (p *Postgres) Record(r Record) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		p.drop(1, dropClosed)
		return
	}
	r = sanitize(r)
	select {
	case p.buf <- r:
		return
	default:
	}
	if p.opts.FullWait > 0 && !p.failing.Load() {
		t := time.NewTimer(p.opts.FullWait)
		defer t.Stop()
		select {
		case p.buf <- r:
			return
		case <-t.C:
		}
	}
	p.drop(1, dropBufferFull)
}

// Dropped is the number of records dropped since the store was opened.
func (p *Postgres) Dropped() uint64 { return p.dropped.Load() }

// Written is the number of records written since the store was opened.
func (p *Postgres) Written() uint64 { return p.written.Load() }

// Close stops accepting records, writes what is buffered (bounded by ctx) and closes the pool.
func (p *Postgres) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.quit)
	p.mu.Unlock()
	var err error
	select {
	case <-p.done:
	case <-ctx.Done():
		err = fmt.Errorf("flush invocation history on close: %w", ctx.Err())
	}
	p.pool.Close()
	<-p.done
	return err
}

func (p *Postgres) drop(n int, reason string) {
	total := p.dropped.Add(uint64(n))
	p.droppedMetric.Add(context.Background(), int64(n), metric.WithAttributes(attribute.String("reason", reason)))
	if reason != dropClosed && p.dropLog.allow(logEvery) {
		p.log.Warn("Warning: invocation history records dropped; invocations are unaffected",
			"reason", reason, "droppedTotal", total)
	}
}

// run is the writer: it batches buffered records by size or interval and writes them.
func (p *Postgres) run() {
	defer close(p.done)
	ticker := time.NewTicker(p.opts.FlushInterval)
	defer ticker.Stop()
	batch := make([]Record, 0, p.opts.BatchSize)
	backoff := retryBackoff
	for {
		select {
		case r := <-p.buf:
			batch = append(batch, r)
			if len(batch) < p.opts.BatchSize {
				continue
			}
		case <-ticker.C:
			if len(batch) == 0 {
				continue
			}
		case <-p.quit:
			p.final(batch)
			return
		}
		batch = p.flush(batch, &backoff)
	}
}

// flush writes batch, retrying with a backoff that grows over consecutive failures, and drops
// it after batchAttempts so an outage cannot stall the writer. It returns the emptied batch.
func (p *Postgres) flush(batch []Record, backoff *wait.Backoff) []Record {
	for attempt := 1; ; attempt++ {
		err := p.write(batch)
		p.failing.Store(err != nil)
		if err == nil {
			*backoff = retryBackoff
			return batch[:0]
		}
		delay := backoff.Step() // every failure counts, the batch's last one too
		var pgErr *pgconn.PgError
		// The server rejected the data: retrying cannot help. A statement it cancelled at our
		// deadline is no rejection.
		permanent := errors.As(err, &pgErr) && !pgconn.Timeout(err)
		if p.failLog.allow(logEvery) {
			p.log.Warn("Warning: writing invocation history failed; will retry and reconnect",
				"error", err, "records", len(batch), "attempt", attempt)
		}
		if permanent || attempt >= batchAttempts {
			p.drop(len(batch), dropWriteFailed)
			return batch[:0]
		}
		select {
		case <-time.After(delay):
		case <-p.quit:
			return batch // final() gives it one last try
		}
	}
}

// final drains the buffer after Close and writes everything once.
func (p *Postgres) final(batch []Record) {
	for {
		select {
		case r := <-p.buf:
			batch = append(batch, r)
			if len(batch) >= p.opts.BatchSize {
				p.writeOnce(batch)
				batch = batch[:0]
			}
		default:
			p.writeOnce(batch)
			return
		}
	}
}

func (p *Postgres) writeOnce(batch []Record) {
	if len(batch) == 0 {
		return
	}
	if err := p.write(batch); err != nil {
		p.log.Warn("Warning: writing invocation history on close failed", "error", err, "records", len(batch))
		p.drop(len(batch), dropWriteFailed)
	}
}

var copyColumns = []string{"namespace", "function", "trigger", "kind", "started_at", "duration_us", "status", "http_status", "error", "trace_id", "cold_start", "revision", "ttfb_us", "bytes_sent", "streamed"}

func (p *Postgres) write(batch []Record) error {
	mctx, mcancel := context.WithTimeout(context.Background(), MigrateTimeout)
	err := p.Migrate(mctx)
	mcancel()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.opts.WriteTimeout)
	defer cancel()
	var n int64
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		var err error
		n, err = tx.CopyFrom(ctx, pgx.Identifier{"invocations"}, copyColumns,
			pgx.CopyFromSlice(len(batch), func(i int) ([]any, error) {
				r := batch[i]
				return []any{r.Namespace, r.Function, r.Trigger, string(r.Kind), r.Start, r.Duration.Microseconds(),
					r.Status, int32(r.HTTPStatus), r.Error, r.TraceID, r.ColdStart, r.Revision, r.TTFB.Microseconds(), r.Bytes, r.Streamed}, nil
			}))
		if err != nil {
			return fmt.Errorf("copy %d invocation records: %w", len(batch), err)
		}
		return upsertUsage(ctx, tx, rollup(batch))
	})
	if err != nil {
		return err
	}
	p.written.Add(uint64(n))
	p.writtenMetric.Add(ctx, n)
	return nil
}

// upsertUsage adds a batch's rollups to usage_hourly in one statement, a row per key, in the
// order of sortedKeys.
func upsertUsage(ctx context.Context, tx pgx.Tx, usage map[usageKey]Usage) error {
	keys := sortedKeys(usage)
	var (
		namespaces, functions                            = make([]string, len(keys)), make([]string, len(keys))
		hours                                            = make([]time.Time, len(keys))
		invocations, errs, colds, durations, mbms, bytes = make([]int64, len(keys)), make([]int64, len(keys)), make([]int64, len(keys)),
			make([]int64, len(keys)), make([]int64, len(keys)), make([]int64, len(keys))
	)
	for i, k := range keys {
		u := usage[k]
		namespaces[i], functions[i], hours[i] = k.namespace, k.function, time.Unix(k.hour, 0).UTC()
		invocations[i], errs[i], colds[i], durations[i], mbms[i], bytes[i] = u.Invocations, u.Errors, u.ColdStarts, u.DurationUS, u.MBMillis, u.BytesOut
	}
	_, err := tx.Exec(ctx, `INSERT INTO usage_hourly AS u (namespace, function, hour, invocations, errors, cold_starts, duration_us, mb_ms, bytes_out)
		SELECT namespace, function, hour, invocations, errors, cold_starts, duration_us, mb_ms, bytes_out FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[])
			WITH ORDINALITY AS b(namespace, function, hour, invocations, errors, cold_starts, duration_us, mb_ms, bytes_out, n)
			ORDER BY n
		ON CONFLICT (namespace, function, hour) DO UPDATE SET invocations = u.invocations + excluded.invocations,
			errors = u.errors + excluded.errors, cold_starts = u.cold_starts + excluded.cold_starts,
			duration_us = u.duration_us + excluded.duration_us, mb_ms = u.mb_ms + excluded.mb_ms, bytes_out = u.bytes_out + excluded.bytes_out`,
		namespaces, functions, hours, invocations, errs, colds, durations, mbms, bytes)
	if err != nil {
		return fmt.Errorf("add up the usage of %d functions and hours: %w", len(keys), err)
	}
	return nil
}

// readable checks a read may run: ErrClosed once the store is closed, an UnavailableError
// while the database cannot be migrated.
func (p *Postgres) readable(ctx context.Context) error {
	p.mu.RLock()
	closed := p.closed
	p.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	if err := p.Migrate(ctx); err != nil {
		return &UnavailableError{Err: err}
	}
	return nil
}

// List returns one page of q.Namespace (and q.Function if set), newest first.
func (p *Postgres) List(ctx context.Context, q Query) (Page, error) {
	q, after, err := q.normalize()
	if err != nil {
		return Page{}, err
	}
	if err := p.readable(ctx); err != nil {
		return Page{}, err
	}
	sql, args := listSQL(q, after)
	rows, err := p.pool.Query(ctx, sql, args...)
	if err != nil {
		return Page{}, &UnavailableError{Err: fmt.Errorf("list invocations of namespace %s: %w", q.Namespace, err)}
	}
	records, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Record, error) {
		var r Record
		var kind string
		var durationUS, ttfbUS int64
		var httpStatus int32
		err := row.Scan(&r.ID, &r.Namespace, &r.Function, &r.Trigger, &kind, &r.Start, &durationUS,
			&r.Status, &httpStatus, &r.Error, &r.TraceID, &r.ColdStart, &r.Revision, &ttfbUS, &r.Bytes, &r.Streamed)
		r.Kind, r.Duration, r.HTTPStatus = Kind(kind), time.Duration(durationUS)*time.Microsecond, int(httpStatus)
		r.TTFB = time.Duration(ttfbUS) * time.Microsecond
		r.Start = r.Start.UTC()
		return r, err
	})
	if err != nil {
		return Page{}, &UnavailableError{Err: fmt.Errorf("list invocations of namespace %s: %w", q.Namespace, err)}
	}
	return page(records, q.Limit), nil
}

// statsSQL groups a window's invocations by bucket (date_bin from the Unix epoch, so buckets
// are aligned to their width in UTC like the memory store's) and once more over the whole
// window (the grouping set (), whose bucket is NULL). One of the two indexes serves the range.
func statsSQL(q StatsQuery, start, end time.Time) (string, []any) {
	args := []any{q.Namespace, q.Window.Bucket.Microseconds(), start, end}
	function := ""
	if q.Function != "" {
		args = append(args, q.Function)
		function = " AND function = $5"
	}
	return `SELECT bucket, count(*), count(*) FILTER (WHERE status <> 'succeeded'),
			percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_us),
			percentile_cont(0.95) WITHIN GROUP (ORDER BY duration_us)
		FROM (SELECT date_bin($2::bigint * interval '1 microsecond', started_at, timestamptz '1970-01-01 00:00:00+00') AS bucket,
				status, duration_us
			FROM invocations
			WHERE namespace = $1 AND started_at >= $3 AND started_at < $4` + function + `) AS w
		GROUP BY GROUPING SETS ((bucket), ())`, args
}

// Stats summarizes q's invocations per bucket of its window in one query.
// RevisionOutcomes counts a revision's outcomes since a time (the index on namespace,
// function and start serves it): the database counts the calls per HTTP status, a handful
// of rows, and the rule judges them here as in the memory store.
func (p *Postgres) RevisionOutcomes(ctx context.Context, ns, function, revision string, since time.Time) (Summary, error) {
	if err := p.readable(ctx); err != nil {
		return Summary{}, err
	}
	fail := func(err error) (Summary, error) {
		return Summary{}, &UnavailableError{Err: fmt.Errorf("outcomes of revision %s of %s/%s: %w", revision, ns, function, err)}
	}
	rows, err := p.pool.Query(ctx, `SELECT http_status, count(*) FROM invocations
		WHERE namespace = $1 AND function = $2 AND started_at >= $3 AND revision = $4 GROUP BY http_status`, ns, function, since, revision)
	if err != nil {
		return fail(err)
	}
	defer rows.Close()
	var s Summary
	for rows.Next() {
		var status int32
		var n int64
		if err := rows.Scan(&status, &n); err != nil {
			return fail(err)
		}
		s.addOutcomes(int(status), n)
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	return s, nil
}

func (p *Postgres) Stats(ctx context.Context, q StatsQuery) (Stats, error) {
	q, start, end, err := q.bounds()
	if err != nil {
		return Stats{}, err
	}
	if err := p.readable(ctx); err != nil {
		return Stats{}, err
	}
	s := newStats(q.Window, start, end)
	fail := func(err error) (Stats, error) {
		return Stats{}, &UnavailableError{Err: fmt.Errorf("stats of invocations of namespace %s: %w", q.Namespace, err)}
	}
	sql, args := statsSQL(q, start, end)
	rows, err := p.pool.Query(ctx, sql, args...)
	if err != nil {
		return fail(err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			bucket   *time.Time
			sum      Summary
			p50, p95 *float64 // NULL over no rows (the total of an empty window)
		)
		if err := rows.Scan(&bucket, &sum.Count, &sum.Errors, &p50, &p95); err != nil {
			return fail(err)
		}
		if sum.Count > 0 && p50 != nil && p95 != nil {
			sum.P50, sum.P95 = fromMicros(*p50), fromMicros(*p95)
		}
		if bucket == nil {
			s.Total = sum
		} else if i := s.bucketOf(*bucket); i >= 0 {
			s.Buckets[i].Summary = sum
		}
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	return s, nil
}

// usageGroup is the SQL of a usage read's group per UsageBy (UsageBy.group): the hour, the
// UTC day, or the function.
var usageGroup = map[UsageBy]string{
	UsageByHour:     "hour, ''",
	UsageByDay:      "date_bin(interval '1 day', hour, timestamptz '1970-01-01 00:00:00+00'), ''",
	UsageByFunction: "NULL::timestamptz, function",
}

// Usage sums the rollups of q's namespace and window per group in one query (the index on
// namespace and hour serves it).
func (p *Postgres) Usage(ctx context.Context, q UsageQuery) (UsageReport, error) {
	q, err := q.bounds()
	if err != nil {
		return UsageReport{}, err
	}
	if err := p.readable(ctx); err != nil {
		return UsageReport{}, err
	}
	fail := func(err error) (UsageReport, error) {
		return UsageReport{}, &UnavailableError{Err: fmt.Errorf("usage of namespace %s: %w", q.Namespace, err)}
	}
	rows, err := p.pool.Query(ctx, `SELECT `+usageGroup[q.By]+`, sum(invocations)::bigint, sum(errors)::bigint, sum(cold_starts)::bigint,
			sum(duration_us)::bigint, sum(mb_ms)::bigint, sum(bytes_out)::bigint
		FROM usage_hourly WHERE namespace = $1 AND hour >= $2 AND hour < $3 GROUP BY 1, 2`, q.Namespace, q.From, q.To)
	if err != nil {
		return fail(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (UsageRow, error) {
		var r UsageRow
		var start *time.Time // NULL by function
		err := row.Scan(&start, &r.Function, &r.Invocations, &r.Errors, &r.ColdStarts, &r.DurationUS, &r.MBMillis, &r.BytesOut)
		if start != nil {
			r.Start = start.UTC()
		}
		return r, err
	})
	if err != nil {
		return fail(err)
	}
	return q.report(out), nil
}

// listSQL builds a keyset query that one of the two indexes serves; it fetches one row more
// than the limit to know whether a next page exists.
func listSQL(q Query, after cursor) (string, []any) {
	var b strings.Builder
	b.WriteString(`SELECT id, namespace, function, trigger, kind, started_at, duration_us, status, http_status, error, trace_id, cold_start, revision, ttfb_us, bytes_sent, streamed
		FROM invocations WHERE namespace = $1`)
	args := []any{q.Namespace}
	if q.Function != "" {
		args = append(args, q.Function)
		fmt.Fprintf(&b, " AND function = $%d", len(args))
	}
	if !after.isZero() {
		args = append(args, after.start, after.id)
		fmt.Fprintf(&b, " AND (started_at, id) < ($%d, $%d)", len(args)-1, len(args))
	}
	args = append(args, q.Limit+1)
	fmt.Fprintf(&b, " ORDER BY started_at DESC, id DESC LIMIT $%d", len(args))
	return b.String(), args
}

// rateLimit lets one event through per interval (log lines during an outage).
type rateLimit struct {
	mu   sync.Mutex
	last time.Time
}

func (l *rateLimit) allow(every time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if now.Sub(l.last) < every {
		return false
	}
	l.last = now
	return true
}
