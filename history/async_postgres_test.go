package history

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"sless.dev/sless/test/pgtest"
	"sless.dev/sless/test/testkit"
)

// The PostgreSQL AsyncStore against the real database: its own database per test, migrated
// by the first call like the gateway's.

func queued(ns, fn, key string) AsyncInvocation {
	return NewAsyncInvocation(AsyncRequest{Namespace: ns, Function: fn, IdempotencyKey: key, RequestHash: "hash-of-" + key, MaxAttempts: 3,
		CallbackURL: "https://hooks.example.com/done"})
}

// createQueued creates a new queued invocation of ns/fn with the idempotency key.
func createQueued(t *testing.T, p *Postgres, key string) AsyncInvocation {
	t.Helper()
	inv, created, err := p.CreateAsync(context.Background(), queued("ns", "fn", key))
	if err != nil || !created {
		t.Fatalf("create %q: created %v, %v", key, created, err)
	}
	return inv
}

func TestPostgresAsyncLifecycle(t *testing.T) {
	p := openTestStore(t, newDatabase(t), PostgresOptions{})
	ctx := context.Background()

	inv := createQueued(t, p, "")
	if !ValidAsyncID(inv.ID) || inv.Status != AsyncQueued || inv.Created.IsZero() || !inv.Created.Equal(inv.Updated) || !inv.Unstarted() {
		t.Fatalf("created invocation: %+v", inv)
	}
	got, err := p.GetAsync(ctx, "ns", inv.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != inv.ID || got.Namespace != "ns" || got.Function != "fn" || got.Status != AsyncQueued || got.MaxAttempts != 3 ||
		got.CallbackURL != "https://hooks.example.com/done" || got.Attempts != 0 || got.Result != nil || got.Truncated ||
		got.Created.Location() != time.UTC || got.Created.Sub(inv.Created).Abs() > time.Microsecond {
		t.Fatalf("get after create: %+v, want %+v", got, inv)
	}

	// queued → running → queued (a retry) → running → succeeded, as the dispatcher moves it.
	steps := []func(*AsyncInvocation){
		func(a *AsyncInvocation) { a.Status, a.Attempts = AsyncRunning, a.Attempts+1 },
		func(a *AsyncInvocation) { a.Status, a.HTTPStatus, a.Error = AsyncQueued, 503, "HTTP 503: busy" },
		func(a *AsyncInvocation) { a.Status, a.Attempts, a.ColdStart = AsyncRunning, a.Attempts+1, true },
		func(a *AsyncInvocation) {
			a.Status, a.HTTPStatus, a.Error = AsyncSucceeded, 200, ""
			a.Result, a.ContentType = []byte(`{"ok":true}`), "application/json"
		},
	}
	wantStatus := []string{AsyncRunning, AsyncQueued, AsyncRunning, AsyncSucceeded}
	prev := inv.Updated
	for i, step := range steps {
		out, err := p.UpdateAsync(ctx, "ns", inv.ID, step)
		if err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
		stored, err := p.GetAsync(ctx, "ns", inv.ID)
		if err != nil {
			t.Fatal(err)
		}
		if out.Status != wantStatus[i] || stored.Status != wantStatus[i] || stored.Attempts != out.Attempts || stored.HTTPStatus != out.HTTPStatus ||
			stored.Error != out.Error || stored.ColdStart != out.ColdStart || stored.Updated.Before(prev) {
			t.Fatalf("update %d: returned %+v, stored %+v", i, out, stored)
		}
		prev = stored.Updated
	}
	final, _ := p.GetAsync(ctx, "ns", inv.ID)
	if !final.Final() || final.Attempts != 2 || final.HTTPStatus != 200 || string(final.Result) != `{"ok":true}` ||
		final.ContentType != "application/json" || final.Error != "" || !final.ColdStart || !final.Created.Equal(got.Created) {
		t.Fatalf("final invocation: %+v", final)
	}
	// What a change cannot touch stays: identity, creation, callback.
	if final.Function != "fn" || final.MaxAttempts != 3 || final.CallbackURL != "https://hooks.example.com/done" {
		t.Fatalf("update changed fixed fields: %+v", final)
	}

	// Another namespace does not see it; unknown IDs are ErrAsyncNotFound, not unavailability.
	for _, c := range []struct{ ns, id string }{{"other", inv.ID}, {"ns", NewAsyncID()}} {
		if _, err := p.GetAsync(ctx, c.ns, c.id); !errors.Is(err, ErrAsyncNotFound) {
			t.Errorf("get %s/%s: %v, want ErrAsyncNotFound", c.ns, c.id, err)
		}
		if _, err := p.UpdateAsync(ctx, c.ns, c.id, func(a *AsyncInvocation) { a.Status = AsyncFailed }); !errors.Is(err, ErrAsyncNotFound) {
			t.Errorf("update %s/%s: %v, want ErrAsyncNotFound", c.ns, c.id, err)
		}
	}
	if got, _ := p.GetAsync(ctx, "ns", inv.ID); got.Status != AsyncSucceeded {
		t.Fatalf("an update in another namespace reached the invocation: %+v", got)
	}

	if err := p.DeleteAsync(ctx, "ns", inv.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := p.GetAsync(ctx, "ns", inv.ID); !errors.Is(err, ErrAsyncNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if err := p.DeleteAsync(ctx, "ns", inv.ID); err != nil {
		t.Fatalf("deleting a deleted invocation: %v", err)
	}
}

func TestPostgresAsyncIdempotencyKey(t *testing.T) {
	p := openTestStore(t, newDatabase(t), PostgresOptions{})
	ctx := context.Background()

	first := createQueued(t, p, "order-7")
	if _, err := p.UpdateAsync(ctx, "ns", first.ID, func(a *AsyncInvocation) { a.Status, a.Attempts = AsyncRunning, 1 }); err != nil {
		t.Fatal(err)
	}
	// The same key again returns the stored invocation as it stands, not the new one.
	again := queued("ns", "fn", "order-7")
	again.MaxAttempts, again.RequestHash = 9, "another request"
	got, created, err := p.CreateAsync(ctx, again)
	if err != nil || created {
		t.Fatalf("repeated key: created %v, %v", created, err)
	}
	if got.ID != first.ID || got.Status != AsyncRunning || got.Attempts != 1 || got.MaxAttempts != 3 || got.IdempotencyKey != "order-7" ||
		got.RequestHash != "hash-of-order-7" {
		t.Fatalf("repeated key returned %+v, want the first invocation (%s) as it stands", got, first.ID)
	}

	// The key is per namespace and function; no key is no key.
	distinct := map[string]bool{first.ID: true}
	for _, inv := range []AsyncInvocation{queued("other", "fn", "order-7"), queued("ns", "fn2", "order-7"), queued("ns", "fn", ""), queued("ns", "fn", "")} {
		got, created, err := p.CreateAsync(ctx, inv)
		if err != nil || !created || distinct[got.ID] {
			t.Fatalf("create %s/%s key %q: created %v id %s, %v; want a new invocation", inv.Namespace, inv.Function, inv.IdempotencyKey, created, got.ID, err)
		}
		distinct[got.ID] = true
	}
	if _, err := p.GetAsync(ctx, "other", first.ID); !errors.Is(err, ErrAsyncNotFound) {
		t.Fatalf("the other namespace's key must not name ns's invocation: %v", err)
	}

	// Concurrent calls with one new key: one is created, every caller gets it.
	const n = 16
	ids := make([]string, n)
	made := make([]bool, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var inv AsyncInvocation
			inv, made[i], errs[i] = p.CreateAsync(ctx, queued("ns", "fn", "race"))
			ids[i] = inv.ID
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var creators int
	for i := range n {
		if made[i] {
			creators++
		}
		if ids[i] != ids[0] {
			t.Fatalf("concurrent creates with one key returned %s and %s", ids[0], ids[i])
		}
	}
	if creators != 1 {
		t.Fatalf("%d concurrent creates reported created, want 1", creators)
	}

	// Once deleted (its publish failed), the key queues anew.
	if err := p.DeleteAsync(ctx, "ns", first.ID); err != nil {
		t.Fatal(err)
	}
	fresh, created, err := p.CreateAsync(ctx, queued("ns", "fn", "order-7"))
	if err != nil || !created || fresh.ID == first.ID {
		t.Fatalf("key after delete: created %v id %s, %v", created, fresh.ID, err)
	}
}

func TestPostgresAsyncList(t *testing.T) {
	p := openTestStore(t, newDatabase(t), PostgresOptions{})
	ctx := context.Background()
	var ids []string // oldest first
	for i := range 12 {
		fn := "a"
		if i%3 == 2 {
			fn = "b"
		}
		inv, _, err := p.CreateAsync(ctx, queued("ns", fn, ""))
		if err != nil {
			t.Fatal(err)
		}
		if i%4 == 0 {
			if _, err := p.UpdateAsync(ctx, "ns", inv.ID, func(a *AsyncInvocation) { a.Status = AsyncFailed }); err != nil {
				t.Fatal(err)
			}
		}
		ids = append(ids, inv.ID)
		time.Sleep(2 * time.Millisecond) // distinct created_at (microseconds in PostgreSQL)
	}
	if _, _, err := p.CreateAsync(ctx, queued("other", "a", "")); err != nil {
		t.Fatal(err)
	}
	// want lists the IDs of ids[i] for which keep(i), newest first.
	want := func(keep func(i int) bool) []string {
		var out []string
		for i := len(ids) - 1; i >= 0; i-- {
			if keep(i) {
				out = append(out, ids[i])
			}
		}
		return out
	}
	all := func(int) bool { return true }
	fnA := func(i int) bool { return i%3 != 2 }
	for _, c := range []struct {
		name             string
		function, status string
		limit            int
		want             []string
	}{
		{"namespace", "", "", 100, want(all)},
		{"first page", "", "", 5, want(all)[:5]},
		{"one", "", "", 1, want(all)[:1]},
		{"function", "a", "", 100, want(fnA)},
		{"function, limited", "a", "", 3, want(fnA)[:3]},
		{"status", "", AsyncFailed, 100, want(func(i int) bool { return i%4 == 0 })},
		{"function and status", "b", AsyncQueued, 100, want(func(i int) bool { return i%3 == 2 && i%4 != 0 })},
		{"no such function", "zzz", "", 100, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			list, err := p.ListAsync(ctx, "ns", c.function, c.status, c.limit)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, inv := range list {
				if inv.Namespace != "ns" {
					t.Fatalf("another namespace's invocation listed: %+v", inv)
				}
				got = append(got, inv.ID)
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("list(%q, %q, %d) = %v, want %v (newest first)", c.function, c.status, c.limit, got, c.want)
			}
		})
	}
	if list, err := p.ListAsync(ctx, "nobody", "", "", 100); err != nil || len(list) != 0 {
		t.Fatalf("empty namespace: %v %v", list, err)
	}
}

// TestPostgresAsyncResult: a result at the cap with its Truncated flag, and one that is not
// UTF-8, read back as stored; the wire form says truncated and switches to base64.
func TestPostgresAsyncResult(t *testing.T) {
	p := openTestStore(t, newDatabase(t), PostgresOptions{})
	ctx := context.Background()
	capped := bytes.Repeat([]byte("r"), MaxAsyncResult)
	binary := []byte{0xff, 0x00, 0xfe, 'x'}
	for _, c := range []struct {
		name      string
		result    []byte
		truncated bool
	}{{"capped", capped, true}, {"binary", binary, false}, {"empty", nil, false}} {
		t.Run(c.name, func(t *testing.T) {
			inv, _, err := p.CreateAsync(ctx, queued("ns", "fn", ""))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.UpdateAsync(ctx, "ns", inv.ID, func(a *AsyncInvocation) {
				a.Status, a.Attempts, a.HTTPStatus, a.Result, a.Truncated = AsyncSucceeded, 1, 200, c.result, c.truncated
			}); err != nil {
				t.Fatal(err)
			}
			got, err := p.GetAsync(ctx, "ns", inv.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Result, c.result) || got.Truncated != c.truncated {
				t.Fatalf("stored result: %d bytes truncated %v, want %d bytes truncated %v", len(got.Result), got.Truncated, len(c.result), c.truncated)
			}
			w := got.API()
			if w.ResultTruncated != c.truncated || (c.name == "binary") != w.ResultBase64 {
				t.Fatalf("wire form: truncated %v base64 %v", w.ResultTruncated, w.ResultBase64)
			}
			if c.name == "capped" && len(w.Result) != MaxAsyncResult {
				t.Fatalf("wire result %d bytes, want %d", len(w.Result), MaxAsyncResult)
			}
		})
	}
}

// TestPostgresAsyncUnavailable: with the database unreachable, before the first migration and
// after it, every call fails with an UnavailableError (the gateway's 503) rather than a
// not-found or a hang, and works again once the database is back.
func TestPostgresAsyncUnavailable(t *testing.T) {
	dsn := newDatabase(t)
	ctx := context.Background()
	check := func(t *testing.T, p *Postgres, id string) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, _, errCreate := p.CreateAsync(cctx, queued("ns", "fn", "k"))
		_, errGet := p.GetAsync(cctx, "ns", id)
		_, errUpdate := p.UpdateAsync(cctx, "ns", id, func(a *AsyncInvocation) { a.Status = AsyncRunning })
		_, errList := p.ListAsync(cctx, "ns", "", "", 10)
		errDelete := p.DeleteAsync(cctx, "ns", id)
		for name, err := range map[string]error{"create": errCreate, "get": errGet, "update": errUpdate, "list": errList, "delete": errDelete} {
			var unavailable *UnavailableError
			if !errors.As(err, &unavailable) || errors.Is(err, ErrAsyncNotFound) {
				t.Errorf("%s with the database down: %v, want an UnavailableError", name, err)
			}
		}
		if cctx.Err() != nil {
			t.Fatal("the calls took until the test's deadline: the connect timeout did not bound them")
		}
	}

	t.Run("never migrated", func(t *testing.T) {
		proxy := testkit.NewLink(t, pgtest.Addr(t))
		url := pgtest.Via(t, dsn, proxy.Addr())
		proxy.Cut()
		p := openTestStore(t, url, PostgresOptions{WriteTimeout: time.Second})
		check(t, p, NewAsyncID())
	})

	t.Run("down after use", func(t *testing.T) {
		proxy := testkit.NewLink(t, pgtest.Addr(t))
		p := openTestStore(t, pgtest.Via(t, dsn, proxy.Addr()), PostgresOptions{WriteTimeout: time.Second})
		inv, _, err := p.CreateAsync(ctx, queued("ns", "fn", ""))
		if err != nil {
			t.Fatal(err)
		}
		proxy.Cut()
		check(t, p, inv.ID)
		proxy.Restore(t)
		var got AsyncInvocation
		deadline := time.Now().Add(20 * time.Second)
		for got, err = p.GetAsync(ctx, "ns", inv.ID); err != nil && time.Now().Before(deadline); got, err = p.GetAsync(ctx, "ns", inv.ID) {
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil || got.ID != inv.ID || got.Status != AsyncQueued {
			t.Fatalf("after the database is back: %+v, %v (the failed update must not have applied)", got, err)
		}
	})
}
