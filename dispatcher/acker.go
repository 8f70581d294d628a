package dispatcher

import (
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// holdNonContiguous is how long an ack behind a still-running earlier delivery may wait to be
// folded into one multiple-ack before it is sent alone. Short, because a held ack holds a
// prefetch slot.
const holdNonContiguous = 2 * time.Millisecond

// settlement is the decided fate of one delivery on the session's channel.
type settlement struct {
	tag     uint64
	requeue bool // nack with requeue; otherwise ack
}

// acker settles a channel's deliveries on one goroutine and coalesces acks: every delivery's
// outcome is reported to it, and it acks the longest run of consecutive settled tags with a
// single multiple-ack (group commit: whatever completed while the previous frame was being
// written goes into the next one). A multiple-ack covers every unacked tag up to its number,
// so it is sent only once all of them are decided; acks behind a delivery still in flight are
// sent alone after holdNonContiguous, so a slow message never stalls the others. Nacks go out
// at once, one by one.
type acker struct {
	ch   *amqp.Channel
	log  *slog.Logger
	in   chan settlement
	done chan struct{}

	next    uint64          // lowest tag not yet decided; tags start at 1 on a channel
	decided map[uint64]bool // decided tags above next: true = ack still to send, false = settled
}

func newAcker(ch *amqp.Channel, log *slog.Logger, prefetch int) *acker {
	a := &acker{ch: ch, log: log, in: make(chan settlement, prefetch), done: make(chan struct{}),
		next: 1, decided: make(map[uint64]bool, prefetch)}
	go a.run()
	return a
}

func (a *acker) ack(tag uint64)     { a.in <- settlement{tag: tag} }
func (a *acker) requeue(tag uint64) { a.in <- settlement{tag: tag, requeue: true} }

// close flushes every reported ack and stops the acker; nothing may be reported after it.
func (a *acker) close() {
	close(a.in)
	<-a.done
}

func (a *acker) run() {
	defer close(a.done)
	hold := time.NewTimer(time.Hour)
	hold.Stop()
	held := false
	for {
		select {
		case s, open := <-a.in:
		batch: // take whatever else is ready too: it rides in the same frame
			for open {
				a.decide(s)
				select {
				case s, open = <-a.in:
				default:
					break batch
				}
			}
			if !open {
				a.flush(true)
				return
			}
			if a.flush(false) && !held {
				hold.Reset(holdNonContiguous)
				held = true
			}
		case <-hold.C:
			held = false
			a.flush(true)
		}
	}
}

func (a *acker) decide(s settlement) {
	if s.requeue {
		if err := a.ch.Nack(s.tag, false, true); err != nil {
			a.log.Debug("nack failed; the broker requeues unacked messages of a closed channel", "deliveryTag", s.tag, "error", err)
		}
	}
	a.decided[s.tag] = !s.requeue
}

// flush sends one multiple-ack for the decided run starting at next, then, when all is set,
// the remaining acks one by one. It reports whether acks are left waiting.
func (a *acker) flush(all bool) (waiting bool) {
	// The broker rejects a multiple-ack whose own tag is no longer unacked, so the frame
	// names the run's last tag that still needs its ack.
	var last uint64
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
	if last != 0 {
		a.send(last, true)
	}
	for tag, ackDue := range a.decided {
		if !ackDue {
			continue
		}
		if !all {
			return true
		}
		a.send(tag, false)
		a.decided[tag] = false
	}
	return false
}

func (a *acker) send(tag uint64, multiple bool) {
	if err := a.ch.Ack(tag, multiple); err != nil {
		a.log.Warn("Warning: ack failed after a successful invocation; the broker will redeliver", "deliveryTag", tag, "multiple", multiple, "error", err)
	}
}
