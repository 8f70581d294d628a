package amqpsource_test

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/dispatcher"
	"sless.dev/sless/test/testkit"
	"sless.dev/sless/triggers/rabbitmq/amqpsource"
)

// TestOutOfOrderCompletionsAckedOnce: completions in scrambled order are acked exactly once
// each (a wrong ack would close the channel and redeliver).
func TestOutOfOrderCompletionsAckedOnce(t *testing.T) {
	q := newQueue(t)
	const n = 600
	publish(t, q, n, nil)
	f := newFnServer(t, func(id string, _ int) (int, time.Duration) {
		i, _ := strconv.Atoi(id)
		return http.StatusOK, time.Duration(i*7%11) * time.Millisecond
	})
	var logs testkit.Buffer
	cfg := config(t, q, f)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	st := run(t, cfg)
	calls, _ := f.snapshot()
	for i := range n {
		if c := calls[strconv.Itoa(i)]; c != 1 {
			t.Fatalf("message %d invoked %d times, want once", i, c)
		}
	}
	if st.Acked != n || strings.Contains(logs.String(), "reconnecting") || strings.Contains(logs.String(), "ack failed") {
		t.Fatalf("stats %+v; logs:\n%s", st, logs.String())
	}
}

// TestSlowMessageDoesNotHoldPrefetch: with prefetch 2, one slow message must not stop the
// others from being consumed and acked.
func TestSlowMessageDoesNotHoldPrefetch(t *testing.T) {
	q := newQueue(t)
	const n = 100
	publish(t, q, n, nil)
	release := make(chan struct{})
	f := newFnServer(t, func(id string, _ int) (int, time.Duration) {
		if id == "0" {
			<-release
		}
		return http.StatusOK, 0
	})
	cfg := config(t, q, f)
	cfg.Concurrency = 2
	done := make(chan error, 1)
	go func() { _, err := runErr(cfg); done <- err }()
	testkit.WaitFor(t, "the other 99 messages processed while message 0 is in flight", 20*time.Second, func() bool {
		c, _ := f.snapshot()
		return len(c) == n-1
	})
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if d := depth(t, q); d != 0 {
		t.Fatalf("queue holds %d messages, want 0", d)
	}
}

func runErr(cfg amqpsource.Config) (dispatcher.Stats, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return amqpsource.Run(ctx, cfg)
}
