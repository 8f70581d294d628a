package amqpsource

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"
)

// channelBook is a channel as the broker keeps it: which tags are unacked, and what the acker
// may settle (what the workers decided). It records every frame the broker would reject or
// that settles a delivery nobody decided upon.
type channelBook struct {
	gate    chan struct{} // when set, an ack frame waits for it: a worker caught sending
	mu      sync.Mutex
	unacked map[uint64]bool
	allowed map[uint64]bool // decided: true = ack, false = requeue
	acked   map[uint64]bool
	nacked  map[uint64]bool
	errs    []string
}

func newChannelBook(n int) *channelBook {
	b := &channelBook{unacked: map[uint64]bool{}, allowed: map[uint64]bool{}, acked: map[uint64]bool{}, nacked: map[uint64]bool{}}
	for tag := uint64(1); tag <= uint64(n); tag++ {
		b.unacked[tag] = true
	}
	return b
}

func (b *channelBook) decide(tag uint64, ack bool) {
	b.mu.Lock()
	b.allowed[tag] = ack
	b.mu.Unlock()
}

func (b *channelBook) settle(tag uint64, ack bool) {
	if want, ok := b.allowed[tag]; !ok || want != ack {
		b.errs = append(b.errs, fmt.Sprintf("tag %d settled (ack=%v) but decided %v (known %v)", tag, ack, want, ok))
	}
	delete(b.unacked, tag)
	if ack {
		b.acked[tag] = true
	} else {
		b.nacked[tag] = true
	}
	runtime.Gosched() // widen the window in which another worker decides while this one sends
}

func (b *channelBook) Ack(tag uint64, multiple bool) error {
	b.mu.Lock()
	if gate := b.gate; gate != nil {
		b.mu.Unlock()
		<-gate
		b.mu.Lock()
	}
	defer b.mu.Unlock()
	if !b.unacked[tag] {
		b.errs = append(b.errs, fmt.Sprintf("ack of tag %d (multiple=%v): unknown delivery tag", tag, multiple))
		return nil
	}
	if multiple {
		for t := range b.unacked {
			if t <= tag {
				b.settle(t, true)
			}
		}
		return nil
	}
	b.settle(tag, true)
	return nil
}

func (b *channelBook) Nack(tag uint64, multiple, requeue bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if multiple || !requeue || !b.unacked[tag] {
		b.errs = append(b.errs, fmt.Sprintf("nack of tag %d (multiple=%v requeue=%v unacked=%v)", tag, multiple, requeue, b.unacked[tag]))
		return nil
	}
	b.settle(tag, false)
	return nil
}

// ackedAll returns the tags of tags not acked yet.
func (b *channelBook) ackedAll(tags []uint64) (missing []uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, t := range tags {
		if !b.acked[t] {
			missing = append(missing, t)
		}
	}
	return missing
}

func (b *channelBook) errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.errs
}

// TestAckerNeverStrandsAnAck: while a delivery is still in flight, an ack decided behind it
// reaches the broker within the hold, even when it was decided while another worker was
// sending the ack before the gap — a stranded ack keeps its prefetch slot until the slow
// message ends (with prefetch 2 the channel stalls). Many rounds, because the losing
// interleaving is narrow: tag 1 is decided and sent while tag 3 is decided, tag 2 in flight.
func TestAckerNeverStrandsAnAck(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for round := range 3000 {
		b := newChannelBook(3)
		a := newAcker(b, log, 3)
		var wg sync.WaitGroup
		for _, tag := range []uint64{1, 3} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rand.IntN(3) {
					runtime.Gosched()
				}
				b.decide(tag, true)
				a.ack(tag)
			}()
		}
		wg.Wait()
		deadline := time.Now().Add(time.Second) // the hold is 2 ms; a loaded machine is slow
		for missing := b.ackedAll([]uint64{1, 3}); len(missing) > 0; missing = b.ackedAll([]uint64{1, 3}) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: acks of tags %v decided (tag 2 in flight) and not sent within 1 s", round, missing)
			}
			time.Sleep(100 * time.Microsecond)
		}
		b.decide(2, true)
		a.ack(2)
		a.close()
		if missing := b.ackedAll([]uint64{2}); len(missing) > 0 {
			t.Fatalf("round %d: tag 2 not acked after close", round)
		}
		if errs := b.errors(); len(errs) > 0 {
			t.Fatalf("round %d: %v", round, errs)
		}
	}
}

// TestAckerDecisionWhileAnotherSends: a worker whose ack frame is slow to write holds the
// sending side; another worker's decision returns at once and still reaches the broker —
// one that extends the run through the sender looking again after its frame, one behind a
// delivery in flight through the hold.
func TestAckerDecisionWhileAnotherSends(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	b := newChannelBook(6)
	a := newAcker(b, log, 6)
	// caught decides first while its frame is held, then each of others while it waits.
	whileSending := func(caught uint64, others ...uint64) {
		t.Helper()
		gate := make(chan struct{})
		b.mu.Lock()
		b.gate = gate
		b.mu.Unlock()
		b.decide(caught, true)
		sent := make(chan struct{})
		go func() { a.ack(caught); close(sent) }()
		time.Sleep(10 * time.Millisecond) // its frame is written, and waits at the gate
		for _, tag := range others {
			b.decide(tag, true)
			returned := make(chan struct{})
			go func() { a.ack(tag); close(returned) }()
			select {
			case <-returned:
			case <-time.After(5 * time.Second):
				t.Fatalf("ack of tag %d waited for another worker's frame", tag)
			}
		}
		b.mu.Lock()
		b.gate = nil
		b.mu.Unlock()
		close(gate)
		<-sent
		want := append([]uint64{caught}, others...)
		deadline := time.Now().Add(time.Second)
		for missing := b.ackedAll(want); len(missing) > 0; missing = b.ackedAll(want) {
			if time.Now().After(deadline) {
				t.Fatalf("acks of tags %v decided while tag %d's frame was written were not sent", missing, caught)
			}
			time.Sleep(time.Millisecond)
		}
	}
	whileSending(1, 2) // 2 extends the run: no hold is armed for it
	whileSending(3, 5) // 4 is in flight: 5 waits for the hold
	b.decide(4, true)
	a.ack(4)
	a.close()
	if missing := b.ackedAll([]uint64{4, 6}); len(missing) != 1 || missing[0] != 6 {
		t.Fatalf("after close: unacked %v, want only the undecided tag 6", missing)
	}
	if errs := b.errors(); len(errs) > 0 {
		t.Fatal(errs)
	}
}

// TestAckerSettlesEachDeliveryOnce: decisions in any order from many workers, some of them
// requeues, settle every delivery exactly as decided — no ack reaching over an undecided or
// requeued tag, none twice — and close leaves nothing unsettled.
func TestAckerSettlesEachDeliveryOnce(t *testing.T) {
	const n = 64
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for round := range 500 {
		b := newChannelBook(n)
		a := newAcker(b, log, n)
		tags := make(chan uint64, n)
		for _, i := range rand.Perm(n) {
			tags <- uint64(i + 1)
		}
		close(tags)
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for tag := range tags {
					if rand.IntN(10) == 0 {
						b.decide(tag, false)
						a.requeue(tag)
						continue
					}
					b.decide(tag, true)
					a.ack(tag)
				}
			}()
		}
		wg.Wait()
		a.close()
		if errs := b.errors(); len(errs) > 0 {
			t.Fatalf("round %d: %v", round, errs)
		}
		b.mu.Lock()
		left := len(b.unacked)
		b.mu.Unlock()
		if left != 0 {
			t.Fatalf("round %d: %d deliveries left unsettled after close", round, left)
		}
	}
}
