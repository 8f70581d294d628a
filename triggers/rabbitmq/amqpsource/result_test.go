package amqpsource_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"sless.dev/sless/dispatcher"
	"sless.dev/sless/history"
	"sless.dev/sless/test/pgtest"
)

// TestAsyncResultCapped: an asynchronous invocation's answer is kept up to
// history.MaxAsyncResult bytes; a longer one is stored capped with Truncated set, in the
// real PostgreSQL, and the wire form (what GET .../invocations/{id} and a callback carry)
// says result_truncated. One exactly at the cap is whole.
func TestAsyncResultCapped(t *testing.T) {
	fn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write(bytes.Repeat([]byte("x"), n))
	}))
	t.Cleanup(fn.Close)
	store, err := history.OpenPostgres(pgtest.NewDatabase(t, "sless_dispatcher_test"), history.PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close(context.Background()) })
	inv, err := dispatcher.NewHTTPInvoker(fn.URL+"/", "", 1)
	if err != nil {
		t.Fatal(err)
	}
	ref := dispatcher.FunctionRef{Namespace: "ns", Name: "fn"}
	runner, err := dispatcher.NewAsyncRunner(dispatcher.Config{Function: ref, Invoker: inv, Async: store,
		Retry: dispatcher.RetryPolicy{MaxAttempts: 1}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer runner.Wait()
	ctx := context.Background()
	for _, c := range []struct {
		size      int
		truncated bool
	}{
		{10, false},
		{history.MaxAsyncResult, false},
		{history.MaxAsyncResult + 1, true},
		{4 * history.MaxAsyncResult, true},
	} {
		req := history.AsyncRequest{Namespace: "ns", Function: "fn", Method: http.MethodGet, Path: "/", RawQuery: "n=" + strconv.Itoa(c.size), MaxAttempts: 1}
		created, _, err := store.CreateAsync(ctx, history.NewAsyncInvocation(req))
		if err != nil {
			t.Fatal(err)
		}
		if next, _ := runner.Attempt(ctx, created.ID, req, 1); next != 0 {
			t.Fatalf("answer of %d bytes: attempt %d due, want the outcome final", c.size, next)
		}
		got, err := store.GetAsync(ctx, "ns", created.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := min(c.size, history.MaxAsyncResult)
		if got.Status != history.AsyncSucceeded || len(got.Result) != want || got.Truncated != c.truncated || got.ContentType != "text/plain" ||
			!bytes.Equal(got.Result, bytes.Repeat([]byte("x"), want)) {
			t.Fatalf("answer of %d bytes stored as %s, %d bytes, truncated %v; want %d bytes, truncated %v", c.size, got.Status, len(got.Result), got.Truncated, want, c.truncated)
		}
		if w := got.API(); len(w.Result) != want || w.ResultTruncated != c.truncated || w.ResultBase64 {
			t.Fatalf("answer of %d bytes on the wire: %d bytes, truncated %v, base64 %v", c.size, len(w.Result), w.ResultTruncated, w.ResultBase64)
		}
	}
}
