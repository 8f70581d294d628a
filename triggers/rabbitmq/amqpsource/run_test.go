package amqpsource_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"sless.dev/sless/dispatcher"
	"sless.dev/sless/history"
	"sless.dev/sless/test/testkit"
	"sless.dev/sless/triggers/rabbitmq/amqpsource"
)

func TestThousandMessagesExactlyOnce(t *testing.T) {
	q := newQueue(t)
	const n = 1000
	publish(t, q, n, nil)
	f := newFnServer(t, ok)
	rec := history.NewMemory(0)
	cfg := config(t, q, f)
	cfg.Recorder = rec
	st := run(t, cfg)

	calls, _ := f.snapshot()
	if len(calls) != n {
		t.Fatalf("%d distinct messages invoked, want %d", len(calls), n)
	}
	for id, c := range calls {
		if c != 1 {
			t.Fatalf("message %s invoked %d times, want exactly once", id, c)
		}
	}
	if st.Acked != n || st.Retried != 0 || st.DeadLettered != 0 {
		t.Fatalf("stats %+v, want %d acked and nothing else", st, n)
	}
	if d := depth(t, q); d != 0 {
		t.Fatalf("queue holds %d messages after the run, want 0", d)
	}
	pg, err := rec.List(context.Background(), history.Query{Namespace: "ns", Function: "fn", Limit: history.MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	if r := pg.Records[0]; len(pg.Records) != history.MaxLimit || r.Kind != history.KindEvent || r.Status != history.StatusSucceeded || r.Trigger != "orders" || r.HTTPStatus != 200 {
		t.Fatalf("history not recorded as succeeded event invocations: %d records, newest %+v", len(pg.Records), pg.Records[0])
	}
}

func TestRetryThenSucceed(t *testing.T) {
	q := newQueue(t)
	const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	publish(t, q, 1, func(int) amqp.Publishing {
		return amqp.Publishing{Body: []byte("plain text"), Headers: amqp.Table{"traceparent": traceparent, "tenant_id": int32(7)}}
	})
	f := newFnServer(t, func(_ string, n int) (int, time.Duration) {
		if n < 3 {
			return http.StatusInternalServerError, 0
		}
		return http.StatusOK, 0
	})
	rec := history.NewMemory(0)
	cfg := config(t, q, f)
	cfg.Recorder = rec
	st := run(t, cfg)

	calls, _ := f.snapshot()
	h := f.headers["0"]
	if calls["0"] != 3 || h.Get("X-Sless-Attempt") != "3" {
		t.Fatalf("invoked %d times, last attempt header %q; want 3 and \"3\"", calls["0"], h.Get("X-Sless-Attempt"))
	}
	if f.unsigned != 0 {
		t.Fatalf("%d of the attempts reached the function without its signature", f.unsigned)
	}
	if st.Retried != 2 || st.Acked != 1 || st.DeadLettered != 0 {
		t.Fatalf("stats %+v, want 2 retried, 1 acked", st)
	}
	if got := f.bodies["0"]; got != `{"body":"plain text"}` {
		t.Fatalf("event body %s, want the text under body, as an HTTP call with it makes", got)
	}
	if got := h.Get("X-Amqp-Header-Tenant-Id"); got != "7" {
		t.Fatalf("application header tenant_id reached the function as %q, want 7", got)
	}
	if tp := h.Get("Traceparent"); !strings.Contains(tp, "0af7651916cd43dd8448eb211c80319c") {
		t.Fatalf("traceparent %q does not continue the producer's trace", tp)
	}
	pg, _ := rec.List(context.Background(), history.Query{Namespace: "ns"})
	var statuses []string
	for _, r := range pg.Records {
		statuses = append(statuses, r.Status)
		if r.TraceID != "0af7651916cd43dd8448eb211c80319c" {
			t.Fatalf("record trace id %q, want the producer's", r.TraceID)
		}
	}
	if fmt.Sprint(statuses) != "[succeeded failed failed]" {
		t.Fatalf("history %v, want [succeeded failed failed]", statuses)
	}
	if depth(t, q) != 0 || depth(t, q+".dlq") != 0 {
		t.Fatal("queue or dead-letter queue not empty")
	}
}

func TestAlwaysFailingGoesToDeadLetter(t *testing.T) {
	q := newQueue(t)
	publish(t, q, 1, nil)
	f := newFnServer(t, func(string, int) (int, time.Duration) { return http.StatusBadGateway, 0 })
	st := run(t, config(t, q, f))

	calls, _ := f.snapshot()
	if calls["0"] != 3 || st.DeadLettered != 1 || st.Retried != 2 {
		t.Fatalf("invoked %d times, stats %+v; want 3 attempts, 2 retried, 1 dead-lettered", calls["0"], st)
	}
	if depth(t, q) != 0 {
		t.Fatal("original message not acked")
	}
	dead := drainQueue(t, q+".dlq")
	if len(dead) != 1 {
		t.Fatalf("dead-letter queue holds %d messages, want 1", len(dead))
	}
	d := dead[0]
	if e, _ := d.Headers["x-sless-last-error"].(string); !strings.Contains(e, "HTTP 502: boom") {
		t.Fatalf("dead letter carries last error %q, want the function's 502 answer", e)
	}
	if d.Headers["x-sless-attempt"] != int32(3) || d.Headers["x-sless-dead-letter-reason"] != "attempts exhausted" || string(d.Body) != `{"i":0}` || d.MessageId != "0" {
		t.Fatalf("dead letter headers %v body %s", d.Headers, d.Body)
	}
}

func TestPoisonMessagesAreDeadLettered(t *testing.T) {
	cases := map[string]struct {
		msg    amqp.Publishing
		reason string
	}{
		"oversize":            {amqp.Publishing{Body: []byte(strings.Repeat("x", 2048))}, "over the limit of 1024"},
		"broken json":         {amqp.Publishing{Body: []byte(`{"a":`), ContentType: "application/json"}, "not valid JSON"},
		"binary not utf8":     {amqp.Publishing{Body: []byte{0xff, 0xfe, 0x00}}, "neither JSON nor UTF-8"},
		"vendor json invalid": {amqp.Publishing{Body: []byte(`nope`), ContentType: "application/vnd.x+json; charset=utf-8"}, "not valid JSON"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			q := newQueue(t)
			publish(t, q, 1, func(int) amqp.Publishing { return tc.msg })
			f := newFnServer(t, ok)
			cfg := config(t, q, f)
			cfg.MaxBodyBytes = 1024
			st := run(t, cfg)
			if calls, _ := f.snapshot(); len(calls) != 0 || st.DeadLettered != 1 {
				t.Fatalf("function invoked %v, stats %+v; want no invocation and one dead letter", calls, st)
			}
			dead := drainQueue(t, q+".dlq")
			if len(dead) != 1 {
				t.Fatalf("dead-letter queue holds %d, want 1", len(dead))
			}
			if r, _ := dead[0].Headers["x-sless-dead-letter-reason"].(string); !strings.Contains(r, tc.reason) {
				t.Fatalf("reason %q, want it to mention %q", r, tc.reason)
			}
		})
	}
}

func TestQueueArgumentMismatchIsAConfigError(t *testing.T) {
	q := newQueue(t)
	ch := channel(t, dial(t))
	if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-max-length": int64(10)}); err != nil {
		t.Fatal(err)
	}
	f := newFnServer(t, ok)
	start := time.Now()
	_, err := amqpsource.Run(context.Background(), config(t, q, f))
	var mm *amqpsource.QueueMismatchError
	var ce *dispatcher.ConfigError
	if !errors.As(err, &mm) || !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a ConfigError wrapping QueueMismatchError", err)
	}
	if mm.Queue != q || mm.Argument != "x-max-length" || !strings.Contains(err.Error(), "--queue-arg x-max-length=") {
		t.Fatalf("mismatch error does not name the queue and argument: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("mismatch was retried instead of reported")
	}
	cfg := config(t, q, f)
	cfg.QueueArgs = amqp.Table{"x-max-length": int64(10)}
	run(t, cfg) // with the producer's arguments it consumes
}

func TestMaxMessagesBoundsTheBatch(t *testing.T) {
	q := newQueue(t)
	publish(t, q, 50, nil)
	f := newFnServer(t, ok)
	cfg := config(t, q, f)
	cfg.ExitWhenEmpty, cfg.MaxMessages, cfg.Concurrency = false, 10, 4
	st := run(t, cfg)
	if calls, _ := f.snapshot(); len(calls) != 10 || st.Acked != 10 {
		t.Fatalf("invoked %d, stats %+v; want exactly 10", len(calls), st)
	}
	testkit.WaitFor(t, "unprocessed messages back in the queue", 5*time.Second, func() bool { return depth(t, q) == 40 })
}

func TestRunRejectsBadConfig(t *testing.T) {
	f := newFnServer(t, ok)
	cases := map[string]struct {
		mutate func(*amqpsource.Config)
		field  string
	}{
		"bad url":         {func(c *amqpsource.Config) { c.URL = "http://broker" }, "amqp-url"},
		"no queue":        {func(c *amqpsource.Config) { c.Queue = "" }, "queue"},
		"dlq is queue":    {func(c *amqpsource.Config) { c.DeadLetterQueue = c.Queue }, "dead-letter-queue"},
		"no function":     {func(c *amqpsource.Config) { c.Function = dispatcher.FunctionRef{} }, "function"},
		"no invoker":      {func(c *amqpsource.Config) { c.Invoker = nil }, "target-url"},
		"huge prefetch":   {func(c *amqpsource.Config) { c.Concurrency = 70000 }, "concurrency"},
		"negative budget": {func(c *amqpsource.Config) { c.MaxMessages = -1 }, "max-messages"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := config(t, "q", f)
			tc.mutate(&cfg)
			_, err := amqpsource.Run(context.Background(), cfg)
			var ce *dispatcher.ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field {
				t.Fatalf("err = %v, want a ConfigError on %s", err, tc.field)
			}
		})
	}
}

// TestForgedRetryAtIsClamped: a retry-at header far in the future waits at most MaxBackoff.
func TestForgedRetryAtIsClamped(t *testing.T) {
	q := newQueue(t)
	publish(t, q, 1, func(int) amqp.Publishing {
		return amqp.Publishing{Body: []byte(`{}`), Headers: amqp.Table{"x-sless-retry-at": time.Now().AddDate(100, 0, 0).UnixMilli()}}
	})
	f := newFnServer(t, ok)
	cfg := config(t, q, f)
	cfg.Retry.MaxBackoff = 200 * time.Millisecond
	start := time.Now()
	st := run(t, cfg)
	if st.Acked != 1 || time.Since(start) > 10*time.Second {
		t.Fatalf("stats %+v after %s; want the message invoked after at most the max backoff", st, time.Since(start))
	}
}

// TestDeadLetterQueueDeletedMidRun: a dead-letter queue deleted while the dispatcher runs is
// declared again before the dead letter is published, instead of the message vanishing.
func TestDeadLetterQueueDeletedMidRun(t *testing.T) {
	q := newQueue(t)
	publish(t, q, 1, nil)
	admin := channel(t, dial(t))
	f := newFnServer(t, func(string, int) (int, time.Duration) {
		if _, err := admin.QueueDelete(q+".dlq", false, false, false); err != nil {
			t.Errorf("delete dead-letter queue: %v", err)
		}
		return http.StatusInternalServerError, 0
	})
	cfg := config(t, q, f)
	cfg.Retry.MaxAttempts = 1
	if st := run(t, cfg); st.DeadLettered != 1 {
		t.Fatalf("stats %+v, want one dead letter", st)
	}
	if dead := drainQueue(t, q+".dlq"); len(dead) != 1 {
		t.Fatalf("dead-letter queue holds %d messages, want 1", len(dead))
	}
}
