package amqpsource

import (
	"log/slog"
	"sync"
	"time"
)

// holdNonContiguous is how long an ack behind a still-running earlier delivery may wait to be
// folded into one multiple-ack before it is sent alone. Short, because a held ack holds a
// prefetch slot.
const holdNonContiguous = 2 * time.Millisecond

// acknowledger is the part of *amqp.Channel the acker uses.
type acknowledger interface {
	Ack(tag uint64, multiple bool) error
	Nack(tag uint64, multiple, requeue bool) error
}

// acker settles a channel's deliveries and coalesces acks: every delivery's outcome is
// reported to it, and it acks the longest run of consecutive settled tags with a single
// multiple-ack (group commit: whatever completed while the previous frame was being written
// goes into the next one). A multiple-ack covers every unacked tag up to its number, so it is
// sent only once all of them are decided; acks behind a delivery still in flight are sent
// alone after holdNonContiguous, so a slow message never stalls the others. Nacks go out at
// once, one by one.
//
// There is no goroutine of its own (a hand-off per message costs a wake-up): the worker that
// reports an outcome sends the frames itself unless another one is already sending. Every
// decided ack is therefore covered by one of two things: a decision that extends the run at
// next is seen by the sender, which looks again after letting go; any other arms the hold
// when it is noted, so no interleaving of senders can strand it.
type acker struct {
	ch  acknowledger
	log *slog.Logger

	// sending is held by whoever writes ack frames, so they leave in decision order; a
	// worker that finds it taken leaves its decision to the holder.
	sending sync.Mutex

	mu      sync.Mutex      // guards the fields below
	next    uint64          // lowest tag not yet decided; tags start at 1 on a channel
	decided map[uint64]bool // decided tags above next: true = ack still to send, false = settled
	hold    *time.Timer     // flushes everything once acks waited holdNonContiguous
	held    bool            // hold is armed
}

func newAcker(ch acknowledger, log *slog.Logger, prefetch int) *acker {
	a := &acker{ch: ch, log: log, next: 1, decided: make(map[uint64]bool, prefetch)}
	a.hold = time.AfterFunc(time.Hour, func() {
		a.mu.Lock()
		a.held = false
		a.mu.Unlock()
		a.flush(true)
	})
	a.hold.Stop()
	return a
}

func (a *acker) ack(tag uint64) { a.decide(tag, true) }

// requeue nacks tag at once. It is sent before the decision is noted: until then no
// multiple-ack can reach over the tag, which would ack it.
func (a *acker) requeue(tag uint64) {
	if err := a.ch.Nack(tag, false, true); err != nil {
		a.log.Debug("nack failed; the broker requeues unacked messages of a closed channel", "deliveryTag", tag, "error", err)
	}
	a.decide(tag, false)
}

// close flushes every reported ack; nothing may be reported after it.
func (a *acker) close() {
	a.hold.Stop()
	a.flush(true)
}

func (a *acker) decide(tag uint64, ackDue bool) {
	a.mu.Lock()
	a.decided[tag] = ackDue
	extends := tag == a.next
	if !extends && ackDue && !a.held { // behind a delivery in flight: the hold sends it
		a.hold.Reset(holdNonContiguous)
		a.held = true
	}
	a.mu.Unlock()
	if extends {
		a.flush(false)
	}
}

// flush sends what is decided, unless (all false) another caller is sending: that one
// looks again after letting go. With all it waits its turn, then sends every ack left.
func (a *acker) flush(all bool) {
	for {
		if all {
			a.sending.Lock()
		} else if !a.sending.TryLock() {
			return
		}
		a.send(all)
		a.sending.Unlock()
		// A decision extending the run, noted while this caller sent, found sending taken
		// and was left here.
		a.mu.Lock()
		_, more := a.decided[a.next]
		a.mu.Unlock()
		if !more {
			return
		}
		all = false
	}
}

// send, with sending held, sends one multiple-ack for each decided run starting at next,
// then, when all, the remaining acks one by one.
func (a *acker) send(all bool) {
	for {
		// The broker rejects a multiple-ack whose own tag is no longer unacked, so the frame
		// names the run's last tag that still needs its ack.
		var last uint64
		a.mu.Lock()
		for {
			ackDue, ok := a.decided[a.next]
			if !ok {
				break
			}
			if ackDue {
				last = a.next
			}
			delete(a.decided, a.next)
			a.next++
		}
		var single []uint64
		if all {
			for tag, ackDue := range a.decided {
				if ackDue {
					single = append(single, tag)
					a.decided[tag] = false
				}
			}
		}
		a.mu.Unlock()
		if last == 0 && single == nil {
			return
		}
		if last != 0 {
			a.frame(last, true)
		}
		for _, tag := range single {
			a.frame(tag, false)
		}
		all = false // what was decided since goes out as runs, or with the hold
	}
}

func (a *acker) frame(tag uint64, multiple bool) {
	if err := a.ch.Ack(tag, multiple); err != nil {
		a.log.Warn("Warning: ack failed after a successful invocation; the broker will redeliver", "deliveryTag", tag, "multiple", multiple, "error", err)
	}
}
