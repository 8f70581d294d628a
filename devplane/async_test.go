package devplane_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"k8s.io/utils/ptr"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/history"
	"sless.dev/sless/test/pgtest"
	"sless.dev/sless/test/testkit"
)

var asyncOn = api.FunctionFields{Async: &api.AsyncFields{Enabled: ptr.To(true), MaxAttempts: ptr.To(int32(2)), BackoffMs: ptr.To(int32(20))}}

// callAsync POSTs body to the function preferring an asynchronous answer.
func (d *dev) callAsync(name, body string, header http.Header) (*http.Response, api.AsyncInvocation) {
	d.t.Helper()
	h := http.Header{"Prefer": {"respond-async"}}
	maps.Copy(h, header)
	resp, b := testkit.PostJSON(d.t, d.endpoint+"/fn/"+d.ns+"/"+name, body, h)
	var inv api.AsyncInvocation
	_ = json.Unmarshal(b, &inv)
	return resp, inv
}

// enqueue makes n asynchronous calls of name (8 at a time), body i's {"name": "<prefix><i>"}
// plus extra, and returns the invocation IDs in order.
func (d *dev) enqueue(name, prefix, extra string, n int) []string {
	d.t.Helper()
	ids := make([]string, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			resp, inv := d.callAsync(name, fmt.Sprintf(`{"name":"%s%d"%s}`, prefix, i, extra), nil)
			if resp.StatusCode != http.StatusAccepted || resp.Header.Get("Location") != "/v1/namespaces/"+d.ns+"/invocations/"+inv.ID {
				d.t.Errorf("call %d: %d, Location %q, invocation %+v", i, resp.StatusCode, resp.Header.Get("Location"), inv)
			}
			ids[i] = inv.ID
		}()
	}
	wg.Wait()
	if d.t.Failed() {
		d.t.FailNow()
	}
	return ids
}

// settle waits until every invocation is final and returns them.
func (d *dev) settle(ids []string, within time.Duration) []api.AsyncInvocation {
	d.t.Helper()
	out := make([]api.AsyncInvocation, len(ids))
	testkit.WaitFor(d.t, fmt.Sprintf("%d asynchronous invocations to finish", len(ids)), within, func() bool {
		for i, id := range ids {
			if out[i].Status == history.AsyncSucceeded || out[i].Status == history.AsyncFailed {
				continue
			}
			inv, err := d.client.GetAsyncInvocation(context.Background(), d.ns, id)
			if err != nil {
				d.t.Fatalf("get invocation %s: %v", id, err)
			}
			out[i] = inv
			if inv.Status != history.AsyncSucceeded && inv.Status != history.AsyncFailed {
				return false
			}
		}
		return true
	})
	return out
}

func TestAsyncInvocationsInTheDataDir(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{})
	ctx := context.Background()
	d.deploy("worker", "python3.11", map[string]string{"handler.py": testkit.AsyncPython}, asyncOn)
	d.deploy("sync-only", "python3.11", map[string]string{"handler.py": testkit.AsyncPython}, api.FunctionFields{})

	ids := d.enqueue("worker", "a", "", 200)
	for i, inv := range d.settle(ids, 2*time.Minute) {
		if inv.Status != history.AsyncSucceeded || inv.Attempts != 1 || inv.HTTPStatus != 200 || inv.Result != fmt.Sprintf(`{"hello": "a%d"}`, i) && inv.Result != fmt.Sprintf(`{"hello":"a%d"}`, i) {
			t.Fatalf("invocation %d: %+v", i, inv)
		}
	}

	failing := d.enqueue("worker", "f", `,"fail":true`, 5)
	for _, inv := range d.settle(failing, time.Minute) {
		if inv.Status != history.AsyncFailed || inv.Attempts != 2 || inv.HTTPStatus != 500 || !strings.Contains(inv.Error, "HTTP 500") {
			t.Fatalf("failing invocation: %+v", inv)
		}
	}
	var asyncRecords int
	for _, r := range d.invocations("worker") {
		if r.Kind == api.KindAsync && r.Status == history.StatusFailed {
			asyncRecords++
		}
		if r.Kind == api.KindAsync && r.Revision != "worker-1" { // the async runner follows the traffic
			t.Fatalf("an async attempt's record names revision %q, want worker-1: %+v", r.Revision, r)
		}
	}
	if asyncRecords != 10 {
		t.Fatalf("want 10 failed attempts (5 invocations × 2) in the history, got %d", asyncRecords)
	}
	failed, err := d.client.ListAsyncInvocations(ctx, d.ns, "worker", history.AsyncFailed, 0)
	if err != nil || len(failed) != 5 {
		t.Fatalf("list failed: %d, %v", len(failed), err)
	}

	// A repeated Idempotency-Key names the same invocation, bound to the request (attack 3
	// of issue 24): the same key with another body is refused, and a caller without the
	// tenant's token learns where the invocation is, not what it answered.
	key := http.Header{"Idempotency-Key": {"order-7"}}
	first, inv1 := d.callAsync("worker", `{"name":"once"}`, key)
	if first.StatusCode != http.StatusAccepted {
		t.Fatalf("idempotency: first call %d", first.StatusCode)
	}
	if got := d.settle([]string{inv1.ID}, time.Minute)[0]; got.Result == "" || !strings.Contains(got.Result, "once") {
		t.Fatalf("the first body must run: %+v", got)
	}
	if other, _ := d.callAsync("worker", `{"name":"twice"}`, key); other.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("the key with another body: %d, want 422", other.StatusCode)
	}
	again, inv2 := d.callAsync("worker", `{"name":"once"}`, key)
	if again.StatusCode != http.StatusAccepted || inv2.ID != inv1.ID || again.Header.Get("Location") != first.Header.Get("Location") ||
		inv2.Result != "" || inv2.HTTPStatus != 0 {
		t.Fatalf("a repeat without a token: %d Location %q %+v, want 202, the first Location and no result", again.StatusCode, again.Header.Get("Location"), inv2)
	}
	mine, inv3 := d.callAsync("worker", `{"name":"once"}`, http.Header{"Idempotency-Key": {"order-7"}, "Authorization": {"Bearer " + d.token}})
	if mine.StatusCode != http.StatusOK || inv3.ID != inv1.ID || !strings.Contains(inv3.Result, "once") {
		t.Fatalf("a repeat by the tenant: %d %+v, want 200 with the result", mine.StatusCode, inv3)
	}

	// Refusals name the fix.
	for _, c := range []struct {
		fn     string
		header http.Header
		code   int
		msg    string
	}{
		{"sync-only", nil, http.StatusConflict, "async.enabled"},
		{"worker", http.Header{"Idempotency-Key": {strings.Repeat("k", 300)}}, http.StatusBadRequest, "Idempotency-Key"},
		{"worker", http.Header{"X-Sless-Callback-Url": {"http://127.0.0.1:1/hook"}}, http.StatusBadRequest, "--async-callback-hosts"},
	} {
		resp, _ := d.callAsync(c.fn, `{}`, c.header)
		if resp.StatusCode != c.code {
			t.Errorf("%s %v: want %d, got %d", c.fn, c.header, c.code, resp.StatusCode)
		}
	}
	if _, err := d.client.GetAsyncInvocation(ctx, d.ns, strings.Repeat("0", 24)); !isStatus(err, http.StatusNotFound) {
		t.Fatalf("unknown invocation: %v", err)
	}
	other := startDev(t, devOptions{dataDir: t.TempDir()})
	if _, err := other.client.GetAsyncInvocation(ctx, d.ns, ids[0]); !isStatus(err, http.StatusForbidden) {
		t.Fatalf("another tenant's invocation: %v", err)
	}
}

// TestAsyncInvocationsSurviveARestart stops sless dev while invocations run and wait, and
// starts it again on the same data dir: every one finishes, none twice as a success record
// of its own.
func TestAsyncInvocationsSurviveARestart(t *testing.T) {
	t.Parallel()
	d, restart := startRestartable(t, "restart", devOptions{})
	d.deploy("slow", "python3.11", map[string]string{"handler.py": testkit.AsyncPython}, asyncOn)
	ids := d.enqueue("slow", "s", `,"sleep":0.3`, 60)
	d.stop()
	d = restart()
	for i, inv := range d.settle(ids, 2*time.Minute) {
		if inv.Status != history.AsyncSucceeded || !strings.Contains(inv.Result, fmt.Sprintf("s%d", i)) {
			t.Fatalf("invocation %d after the restart: %+v", i, inv)
		}
	}
}

// TestAsyncInvocationsOnTheBroker: with a broker sless dev queues on RabbitMQ and consumes
// with the cluster's dispatcher; exhausted invocations are in the dead-letter queue.
func TestAsyncInvocationsOnTheBroker(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{amqpURL: testkit.AMQPURL(t)})
	d.deploy("worker", "python3.11", map[string]string{"handler.py": testkit.AsyncPython}, asyncOn)
	queue := d.ns + ".async.worker"
	_, ch := brokerChannel(t, queue)
	ids := d.enqueue("worker", "b", "", 100)
	for i, inv := range d.settle(ids, 2*time.Minute) {
		if inv.Status != history.AsyncSucceeded || !strings.Contains(inv.Result, fmt.Sprintf("b%d", i)) {
			t.Fatalf("invocation %d: %+v", i, inv)
		}
	}
	failing := d.enqueue("worker", "f", `,"fail":true`, 3)
	for _, inv := range d.settle(failing, time.Minute) {
		if inv.Status != history.AsyncFailed || inv.Attempts != 2 {
			t.Fatalf("failing invocation: %+v", inv)
		}
	}
	var dead []amqp.Delivery
	testkit.WaitFor(t, "3 messages in the dead-letter queue", 30*time.Second, func() bool {
		m, ok, err := ch.Get(queue+".dlq", false)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			dead = append(dead, m)
		}
		return len(dead) == 3
	})
	for _, m := range dead {
		if e, _ := m.Headers["x-sless-last-error"].(string); !strings.Contains(e, "HTTP 500") {
			t.Fatalf("dead letter without the last error: %v", m.Headers)
		}
	}
}

// bigAnswer answers {"n": N} with N bytes of text.
const bigAnswer = `def handle(event, request=None):
    return "x" * event["n"]
`

// TestAsyncResultTruncated: an answer over history.MaxAsyncResult is kept capped and marked
// result_truncated in the API, with sless dev's own file store (across a restart too) and
// with the PostgreSQL store; one at the cap is kept whole.
func TestAsyncResultTruncated(t *testing.T) {
	t.Parallel()
	stores := map[string]func(t *testing.T) history.AsyncStore{
		"files": func(*testing.T) history.AsyncStore { return nil },
		"postgres": func(t *testing.T) history.AsyncStore {
			pg, err := history.OpenPostgres(pgtest.NewDatabase(t, "sless_devplane_test"), history.PostgresOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = pg.Close(context.Background()) })
			return pg
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := open(t)
			d, restart := startRestartable(t, "truncate", devOptions{asyncStore: store})
			d.deploy("big", "python3.11", map[string]string{"handler.py": bigAnswer}, asyncOn)
			sizes := []int{history.MaxAsyncResult, history.MaxAsyncResult + 1, 3 * history.MaxAsyncResult}
			ids := make([]string, len(sizes))
			for i, n := range sizes {
				resp, inv := d.callAsync("big", fmt.Sprintf(`{"n":%d}`, n), nil)
				if resp.StatusCode != http.StatusAccepted {
					t.Fatalf("call of %d bytes: %d", n, resp.StatusCode)
				}
				ids[i] = inv.ID
			}
			check := func(when string, got []api.AsyncInvocation) {
				t.Helper()
				for i, inv := range got {
					truncated := sizes[i] > history.MaxAsyncResult
					if inv.Status != history.AsyncSucceeded || len(inv.Result) != history.MaxAsyncResult || inv.ResultTruncated != truncated ||
						inv.ResultBase64 || strings.Trim(inv.Result, "x") != "" {
						t.Fatalf("%s: answer of %d bytes: %s, %d bytes, result_truncated %v; want %d bytes, result_truncated %v",
							when, sizes[i], inv.Status, len(inv.Result), inv.ResultTruncated, history.MaxAsyncResult, truncated)
					}
				}
			}
			check("settled", d.settle(ids, 2*time.Minute))
			list, err := d.client.ListAsyncInvocations(context.Background(), d.ns, "big", "", 0)
			if err != nil || len(list) != len(sizes) {
				t.Fatalf("list: %d, %v", len(list), err)
			}
			for _, inv := range list {
				if inv.ResultTruncated != (inv.ID != ids[0]) {
					t.Fatalf("listed %s with result_truncated %v", inv.ID, inv.ResultTruncated)
				}
			}
			if store == nil { // the files are read back at start
				d.stop()
				d = restart()
				check("after a restart", d.settle(ids, time.Minute))
			}
		})
	}
}

// TestAsyncColdStartIsInTheHistory: an asynchronous invocation that started the function from
// zero says cold_start on the invocation and on its attempt's history record; /metrics'
// sless_cold_starts_total counts /fn/ calls answered through the gateway only, so it has no
// series for it (docs/architecture.md, "Cold starts").
func TestAsyncColdStartIsInTheHistory(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{})
	d.deploy("cold-async", "python3.11", map[string]string{"handler.py": testkit.AsyncPython}, asyncOn)
	resp, inv := d.callAsync("cold-async", `{"name":"zero"}`, nil)
	if resp.StatusCode != http.StatusAccepted || resp.Header.Get("X-Sless-Cold-Start") != "" {
		t.Fatalf("202 expected without a cold-start header (nothing ran yet): %d %q", resp.StatusCode, resp.Header.Get("X-Sless-Cold-Start"))
	}
	if got := d.settle([]string{inv.ID}, time.Minute)[0]; got.Status != history.AsyncSucceeded || !got.ColdStart {
		t.Fatalf("the first invocation from zero: %+v, want succeeded with cold_start", got)
	}
	var recs []api.Invocation
	testkit.WaitFor(t, "the attempt's history record", 10*time.Second, func() bool { recs = d.invocations("cold-async"); return len(recs) == 1 })
	if r := recs[0]; r.Kind != api.KindAsync || !r.ColdStart {
		t.Fatalf("history record: %+v, want kind async with cold_start", r)
	}
	if strings.Contains(d.metrics(), `function="cold-async"`) {
		t.Fatalf("/metrics has a series of the asynchronous invocation's function: the gateway's cold-start metrics count /fn/ calls only")
	}
}
