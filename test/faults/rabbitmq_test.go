//go:build faults

package faults

import (
	"testing"
	"time"
)

// TestRabbitMQRestart: the broker stopped and started again, as a service restart would,
// while sless dev's event trigger and a standalone `sless dispatcher` each work through 5,000
// queued messages and HTTP invocations go on. Both consumers reconnect by themselves; every
// message runs; unacked ones come again.
func TestRabbitMQRestart(t *testing.T) {
	const scenario = "stop/start RabbitMQ"
	db := s.pg.newDatabase(t, "rabbitmq_restart")
	d := newDev(t, db)
	const dispatcherQueue = "faults-restart-dispatcher"
	devQueue := d.queue("faults-restart-dev")
	s.broker.declareQueue(t, devQueue)
	s.broker.declareQueue(t, dispatcherQueue)
	s.broker.publish(t, dispatcherQueue, "d", messages, 0).wait(t)
	loads := d.startLoads(devQueue, 0)
	loads.pub.wait(t) // every message is in the broker before it goes down
	target := startFunction(t, "function-restart", d.ledger)
	d.addEventTrigger(devQueue)
	// The dispatcher drains its queue several times faster than sless dev's trigger: started
	// together, it could finish all of it before the broker was down. It starts once the
	// trigger is under way, and the broker stops as soon as it is too, so both are mid-queue.
	d.waitFor("the event trigger to be under way", func() bool {
		return readLedger(t, d.ledger).count("e", messages, time.Time{}).distinct >= messages/5
	})
	dispatcher := startProcT(t, dispatcherSpec(t, "dispatcher-restart", dispatcherQueue, target, db))
	d.waitFor("the dispatcher to be under way", func() bool {
		return readLedger(t, d.ledger).count("d", messages, time.Time{}).distinct >= messages/5
	})

	stopped := time.Now()
	if err := s.broker.stop(); err != nil {
		t.Fatal(err)
	}
	down := readLedger(t, d.ledger)
	e, dd := down.count("e", messages, time.Time{}), down.count("d", messages, time.Time{})
	t.Logf("still queued when the broker had stopped: %d of the trigger's, %d of the dispatcher's messages", messages-e.distinct, messages-dd.distinct)
	if e.distinct == messages || dd.distinct == messages {
		t.Fatal("a queue was drained before the broker stopped; nothing was in flight")
	}
	if err := s.broker.start(); err != nil {
		t.Fatal(err)
	}
	f := fault{at: stopped, over: time.Now()}
	t.Logf("broker down for %s (stop and boot)", f.over.Sub(f.at).Round(time.Millisecond))

	o := d.finish(scenario, loads, f, 2*time.Second, db, nil)
	if err := dispatcher.wait(2 * time.Minute); err != nil {
		t.Fatalf("the dispatcher did not drain its queue after the restart and exit 0: %v", err)
	}
	c := waitLedger(t, d.ledger, "d", messages, f.over, 10*time.Second)
	t.Logf("reconnected after the broker was up: event trigger %s, dispatcher %s",
		o.e.first.Sub(f.over).Round(time.Millisecond), c.first.Sub(f.over).Round(time.Millisecond))
	hist := settledHistory(t, db, dispatcherNamespace, "ledger", map[string]int{"event": c.runs}, 2*time.Second)
	s.results.add(t, append(o.rows, amqpRow(scenario, loadDispatcher, messages, c, hist["event"], f))...)
	if n := loads.http.retried.Load(); n > 0 {
		t.Errorf("%d HTTP invocations failed while the broker restarted", n)
	}
	for _, q := range []string{devQueue, dispatcherQueue} {
		if n := s.broker.queueDepth(t, q+".dlq"); n != 0 {
			t.Errorf("%d messages of %s were dead-lettered; the function never failed", n, q)
		}
	}
	assertHistoryLoss(t, "http", o.h.runs, o.hist["http"], 0)
	// What each consumer aborted in flight when the broker went, or dropped with its
	// writer's buffer full while catching up, is all the history may miss.
	assertHistoryLoss(t, "event", o.e.runs+c.runs, o.hist["event"]+hist["event"], d.proc.historyShortfall()+dispatcher.historyShortfall())
}
