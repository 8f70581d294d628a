package history

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

var _ AsyncStore = (*Postgres)(nil)

const asyncColumns = `id, namespace, function, idempotency_key, request_hash, status, attempts, max_attempts, created_at, updated_at,
	http_status, result, truncated, content_type, error, callback_url, cold_start`

func scanAsync(row pgx.Row) (AsyncInvocation, error) {
	var a AsyncInvocation
	err := row.Scan(&a.ID, &a.Namespace, &a.Function, &a.IdempotencyKey, &a.RequestHash, &a.Status, &a.Attempts, &a.MaxAttempts,
		&a.Created, &a.Updated, &a.HTTPStatus, &a.Result, &a.Truncated, &a.ContentType, &a.Error, &a.CallbackURL, &a.ColdStart)
	a.Created, a.Updated = a.Created.UTC(), a.Updated.UTC()
	if errors.Is(err, pgx.ErrNoRows) {
		return a, ErrAsyncNotFound
	}
	return a, err
}

// CreateAsync implements AsyncStore: an insert that loses to an existing idempotency key
// returns the existing invocation.
func (p *Postgres) CreateAsync(ctx context.Context, inv AsyncInvocation) (AsyncInvocation, bool, error) {
	if err := p.Migrate(ctx); err != nil {
		return inv, false, &UnavailableError{Err: err}
	}
	if inv.ID == "" {
		inv.ID = NewAsyncID()
	}
	now := time.Now().UTC()
	inv.Created, inv.Updated = now, now
	tag, err := p.pool.Exec(ctx, `INSERT INTO async_invocations (`+asyncColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
		ON CONFLICT (namespace, function, idempotency_key) WHERE idempotency_key <> '' DO NOTHING`,
		inv.ID, inv.Namespace, inv.Function, inv.IdempotencyKey, inv.RequestHash, inv.Status, inv.Attempts, inv.MaxAttempts, inv.Created, inv.Updated,
		inv.HTTPStatus, inv.Result, inv.Truncated, inv.ContentType, inv.Error, inv.CallbackURL, inv.ColdStart)
	if err != nil {
		return inv, false, &UnavailableError{Err: fmt.Errorf("store asynchronous invocation: %w", err)}
	}
	if tag.RowsAffected() == 1 {
		return inv, true, nil
	}
	existing, err := scanAsync(p.pool.QueryRow(ctx, `SELECT `+asyncColumns+` FROM async_invocations
		WHERE namespace = $1 AND function = $2 AND idempotency_key = $3`, inv.Namespace, inv.Function, inv.IdempotencyKey))
	if err != nil {
		return inv, false, &UnavailableError{Err: fmt.Errorf("read asynchronous invocation: %w", err)}
	}
	return existing, false, nil
}

// GetAsync implements AsyncStore.
func (p *Postgres) GetAsync(ctx context.Context, ns, id string) (AsyncInvocation, error) {
	if err := p.Migrate(ctx); err != nil {
		return AsyncInvocation{}, &UnavailableError{Err: err}
	}
	a, err := scanAsync(p.pool.QueryRow(ctx, `SELECT `+asyncColumns+` FROM async_invocations WHERE namespace = $1 AND id = $2`, ns, id))
	if err != nil && !errors.Is(err, ErrAsyncNotFound) {
		return a, &UnavailableError{Err: fmt.Errorf("read asynchronous invocation: %w", err)}
	}
	return a, err
}

// UpdateAsync implements AsyncStore in one transaction with the row locked.
func (p *Postgres) UpdateAsync(ctx context.Context, ns, id string, change func(*AsyncInvocation)) (AsyncInvocation, error) {
	if err := p.Migrate(ctx); err != nil {
		return AsyncInvocation{}, &UnavailableError{Err: err}
	}
	var out AsyncInvocation
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		a, err := scanAsync(tx.QueryRow(ctx, `SELECT `+asyncColumns+` FROM async_invocations WHERE namespace = $1 AND id = $2 FOR UPDATE`, ns, id))
		if err != nil {
			return err
		}
		change(&a)
		a.Updated = time.Now().UTC()
		_, err = tx.Exec(ctx, `UPDATE async_invocations SET status = $3, attempts = $4, updated_at = $5, http_status = $6,
			result = $7, truncated = $8, content_type = $9, error = $10, cold_start = $11 WHERE namespace = $1 AND id = $2`,
			ns, id, a.Status, a.Attempts, a.Updated, a.HTTPStatus, a.Result, a.Truncated, a.ContentType, a.Error, a.ColdStart)
		out = a
		return err
	})
	if err != nil && !errors.Is(err, ErrAsyncNotFound) {
		return out, &UnavailableError{Err: fmt.Errorf("update asynchronous invocation %s: %w", id, err)}
	}
	return out, err
}

// DeleteAsync implements AsyncStore.
func (p *Postgres) DeleteAsync(ctx context.Context, ns, id string) error {
	if _, err := p.pool.Exec(ctx, `DELETE FROM async_invocations WHERE namespace = $1 AND id = $2`, ns, id); err != nil {
		return &UnavailableError{Err: fmt.Errorf("delete asynchronous invocation %s: %w", id, err)}
	}
	return nil
}

// ListAsync implements AsyncStore.
func (p *Postgres) ListAsync(ctx context.Context, ns, function, status string, limit int) ([]AsyncInvocation, error) {
	if err := p.Migrate(ctx); err != nil {
		return nil, &UnavailableError{Err: err}
	}
	rows, err := p.pool.Query(ctx, `SELECT `+asyncColumns+` FROM async_invocations
		WHERE namespace = $1 AND ($2 = '' OR function = $2) AND ($3 = '' OR status = $3)
		ORDER BY created_at DESC, id DESC LIMIT $4`, ns, function, status, limit)
	if err != nil {
		return nil, &UnavailableError{Err: fmt.Errorf("list asynchronous invocations: %w", err)}
	}
	defer rows.Close()
	var out []AsyncInvocation
	for rows.Next() {
		a, err := scanAsync(rows)
		if err != nil {
			return nil, &UnavailableError{Err: err}
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, &UnavailableError{Err: fmt.Errorf("list asynchronous invocations: %w", err)}
	}
	return out, nil
}
