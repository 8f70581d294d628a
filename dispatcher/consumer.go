package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"sless.dev/sless/history"
)

// reconnectBackoff spaces the reconnects after the broker went away: 100 ms, doubling up to
// 30 s, from the start again after a session that got established.
var reconnectBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Cap: 30 * time.Second, Steps: math.MaxInt32}

// Run consumes src until ctx is canceled (then drains: stops consuming, lets in-flight
// invocations finish within DrainTimeout, hands undelivered messages back), the queue stayed
// empty for IdleTimeout (ExitWhenEmpty) or MaxMessages were taken. It reconnects with backoff
// after the broker, the connection or the channel goes away; configuration errors (queue
// argument mismatch, refused credentials) end it at once as a *ConfigError.
func Run(ctx context.Context, cfg Config, src Source) (Stats, error) {
	cfg = cfg.withDefaults()
	if err := errors.Join(src.Check(cfg.Concurrency), cfg.validate()); err != nil {
		return Stats{}, err
	}
	queue := src.Destination()
	d := &dispatcher{cfg: cfg, src: src, log: cfg.Logger.With("queue", queue, "function", cfg.Function.String()), m: newMeters(queue),
		spans: newDeliverySpans(src)}
	kind := history.KindEvent
	if cfg.Async != nil {
		kind = history.KindAsync
	}
	d.call = cfg.call(kind)
	// Outcomes settled by now still POST their callbacks: a Job exiting on an empty queue
	// would cut them off.
	defer d.waitCallbacks()
	backoff := reconnectBackoff
	for {
		done, established, err := d.session(ctx)
		if done {
			return d.m.stats(), err
		}
		var cfgErr *ConfigError
		if errors.As(err, &cfgErr) {
			return d.m.stats(), err
		}
		if ctx.Err() != nil {
			return d.m.stats(), nil
		}
		if established {
			backoff = reconnectBackoff
		}
		delay := backoff.Step()
		d.log.Warn("Warning: the broker connection failed or was lost; reconnecting", "error", err, "retryIn", delay)
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return d.m.stats(), nil
		}
	}
}

type dispatcher struct {
	cfg   Config
	src   Source
	log   *slog.Logger
	m     *meters
	spans deliverySpans
	call  call
	taken atomic.Int64 // deliveries taken by workers, over all sessions (MaxMessages)
	// callbacks are the outcome POSTs under way (callBack); Run and AsyncRunner.Wait wait
	// for them.
	callbacks sync.WaitGroup
	pending   atomic.Int64
}

// session is one connection's lifetime. done reports that Run should return; established that
// consuming had started (so the reconnect backoff starts over).
func (d *dispatcher) session(ctx context.Context) (done, established bool, err error) {
	src, err := d.src.Open(ctx, d.cfg.Concurrency, d.log)
	if err != nil {
		return false, false, err
	}
	defer src.Close()
	d.log.Info("consuming", "prefetch", d.cfg.Concurrency)
	s := &session{d: d, src: src, stopping: make(chan struct{}),
		gone: make(chan struct{}), limit: make(chan struct{}), quit: make(chan struct{})}
	// In-flight invocations outlive ctx: a stop request drains them instead of cutting them off.
	s.workCtx, s.abort = context.WithCancel(context.WithoutCancel(ctx))
	s.wg.Add(d.cfg.Concurrency)
	for range d.cfg.Concurrency {
		go s.work()
	}
	defer s.abort()
	defer s.stopTaking()
	done, err = s.loop(ctx)
	return done, true, err
}

type session struct {
	d        *dispatcher
	src      Session
	workCtx  context.Context
	abort    context.CancelFunc
	stopping chan struct{} // closed on a stop request: pending retry waits give up
	gone     chan struct{} // closed by the first worker to find deliveries closed
	goneOnce sync.Once
	limit    chan struct{} // closed by the worker that took the MaxMessages-th delivery
	quit     chan struct{} // closed to make the workers stop taking deliveries
	quitOnce sync.Once
	handBack atomic.Bool    // draining: deliveries still arriving go back to the broker untouched
	wg       sync.WaitGroup // the workers
}

func (s *session) loop(ctx context.Context) (bool, error) {
	d := s.d
	idle := time.NewTicker(max(d.cfg.IdleTimeout/4, 10*time.Millisecond))
	defer idle.Stop()
	// Activity is seen per tick, as a change of the count of deliveries taken: the workers
	// take them straight from the consumer, with no clock read per message.
	lastActivity, seen := time.Now(), d.taken.Load()
	for {
		select {
		case <-s.gone: // the channel or connection closed under us: the broker requeues the unacked
			s.cut()
			return false, fmt.Errorf("deliveries of queue %s ended: %w", d.src.Destination(), s.src.Lost())
		case <-s.limit:
			d.log.Info("message limit reached; draining", "maxMessages", d.cfg.MaxMessages)
			return true, s.drain(false)
		case <-ctx.Done():
			d.log.Info("stop requested; draining", "inFlight", d.m.inFlight.Load())
			close(s.stopping)
			return true, s.drain(false)
		case <-idle.C:
			if n := d.taken.Load(); n != seen {
				seen, lastActivity = n, time.Now()
			}
			if !d.cfg.ExitWhenEmpty || d.m.inFlight.Load() > 0 || time.Since(lastActivity) < d.cfg.IdleTimeout {
				continue
			}
			empty, err := s.src.Empty()
			if err != nil {
				s.cut()
				return false, fmt.Errorf("check queue %s for messages: %w", d.src.Destination(), err)
			}
			if empty {
				d.log.Info("queue empty; exiting", "idle", d.cfg.IdleTimeout)
				return true, s.drain(true)
			}
			lastActivity = time.Now()
		}
	}
}

// cut aborts in-flight invocations after the channel failed; the broker requeues what they
// leave unacked.
func (s *session) cut() {
	s.abort()
	s.stopTaking()
	s.wg.Wait()
	_ = s.src.Close()
}

// stopTaking makes the workers return once their current delivery is settled; deliveries
// not taken stay unacked, and the broker requeues them when the channel closes.
func (s *session) stopTaking() { s.quitOnce.Do(func() { close(s.quit) }) }

// work is one of the session's Concurrency workers. Long-lived workers rather than a
// goroutine per message: their stacks have grown to the invocation path's depth once. Each
// takes deliveries straight from the consumer (no hand-off through another goroutine): the
// broker delivers at most prefetch = Concurrency unacked messages, and a worker takes the
// next one only after settling its own. It returns when deliveries close (the consumer was
// cancelled, or the channel died) or on stopTaking.
func (s *session) work() {
	defer s.wg.Done()
	d := s.d
	t := &invocationTimer{parent: s.workCtx}
	for {
		m, ok := s.src.Next(s.quit)
		if !ok {
			select {
			case <-s.quit:
			default:
				s.goneOnce.Do(func() { close(s.gone) })
			}
			return
		}
		n := d.taken.Add(1)
		if s.handBack.Load() || d.cfg.MaxMessages > 0 && n > int64(d.cfg.MaxMessages) {
			d.requeue(m) // on its way when draining began, or over the limit
			continue
		}
		if n == int64(d.cfg.MaxMessages) {
			close(s.limit)
		}
		d.m.count(&d.m.consumed, d.m.consumedC)
		d.m.flight(1)
		d.handle(s.workCtx, s.stopping, t, m)
		d.m.flight(-1)
	}
}

// drain cancels the consumer and waits for in-flight work. Deliveries that were already on
// their way are processed when finishRest (the queue was empty: they are the last messages),
// otherwise handed back to the broker untouched.
func (s *session) drain(finishRest bool) error {
	d := s.d
	s.handBack.Store(!finishRest)
	if err := s.src.Cancel(); err != nil {
		d.log.Warn("Warning: cancelling the consumer failed; unacked messages return to the queue", "error", err)
		s.stopTaking() // deliveries may never close: the workers stop at their current one
	}
	// The workers return once the cancelled consumer's deliveries are closed, each after
	// settling what it holds.
	finished := make(chan struct{})
	go func() { s.wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(d.cfg.DrainTimeout):
		d.log.Warn("Warning: in-flight invocations did not finish within the drain timeout; aborting them, their messages return to the queue",
			"drainTimeout", d.cfg.DrainTimeout, "inFlight", d.m.inFlight.Load())
		s.abort()
		s.stopTaking()
		<-finished
	}
	if err := s.src.Close(); err != nil {
		return err
	}
	st := d.m.stats()
	d.log.Info("drained", "consumed", st.Consumed, "acked", st.Acked, "retried", st.Retried,
		"deadLettered", st.DeadLettered, "requeued", st.Requeued)
	return nil
}
