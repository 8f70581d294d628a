package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"k8s.io/apimachinery/pkg/util/wait"

	"sless.dev/sless/history"
)

const (
	heartbeat      = 10 * time.Second
	connectTimeout = 15 * time.Second
)

// reconnectBackoff spaces the reconnects after the broker went away: 100 ms, doubling up to
// 30 s, from the start again after a session that got established.
var reconnectBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Cap: 30 * time.Second, Steps: math.MaxInt32}

// Run consumes cfg.Queue until ctx is canceled (then drains: stops consuming, lets in-flight
// invocations finish within DrainTimeout, hands undelivered messages back), the queue stayed
// empty for IdleTimeout (ExitWhenEmpty) or MaxMessages were taken. It reconnects with backoff
// after the broker, the connection or the channel goes away; configuration errors (queue
// argument mismatch, refused credentials) end it at once as a *ConfigError.
func Run(ctx context.Context, cfg Config) (Stats, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return Stats{}, err
	}
	d := &dispatcher{cfg: cfg, log: cfg.Logger.With("queue", cfg.Queue, "function", cfg.Function.String()), m: newMeters(cfg.Queue),
		spans: newDeliverySpans(cfg.Queue)}
	kind := history.KindEvent
	if cfg.Async != nil {
		kind = history.KindAsync
	}
	d.call = call{invoker: cfg.Invoker, timeout: cfg.Timeout, recorder: cfg.Recorder, record: history.Record{
		Namespace: cfg.Function.Namespace, Function: cfg.Function.Name, Trigger: cfg.Trigger, Kind: kind}}
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
		d.log.Warn("Warning: RabbitMQ connection failed or was lost; reconnecting", "error", err, "retryIn", delay)
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return d.m.stats(), nil
		}
	}
}

type dispatcher struct {
	cfg   Config
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
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(d.cfg.ConnectionName)
	conn, err := amqp.DialConfig(d.cfg.URL, amqp.Config{Heartbeat: heartbeat, Properties: props, Dial: dialer(ctx)})
	if err != nil {
		return false, false, classifyDial(err)
	}
	defer conn.Close()
	connClosed := conn.NotifyClose(make(chan *amqp.Error, 1))
	ch, err := d.openChannel(conn)
	if err != nil {
		return false, false, err
	}
	const tag = "sless-dispatcher"
	deliveries, err := ch.Consume(d.cfg.Queue, tag, false, false, false, false, nil)
	if err != nil {
		return false, false, fmt.Errorf("consume queue %s: %w", d.cfg.Queue, err)
	}
	d.log.Info("consuming", "prefetch", d.cfg.Concurrency)
	s := &session{d: d, ch: ch, tag: tag, deliveries: deliveries, connClosed: connClosed, stopping: make(chan struct{}),
		acker: newAcker(ch, d.log, d.cfg.Concurrency), gone: make(chan struct{}), limit: make(chan struct{}), quit: make(chan struct{})}
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

// dialer is amqp.DefaultDial made cancellable, so a stop request does not wait out a connect
// to an unreachable broker.
func dialer(ctx context.Context) func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{Timeout: connectTimeout}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		// Heartbeats start only after the handshake; amqp091 clears this deadline once open.
		if err := conn.SetDeadline(time.Now().Add(connectTimeout)); err != nil {
			conn.Close()
			return nil, err
		}
		return conn, nil
	}
}

type session struct {
	d          *dispatcher
	ch         *amqp.Channel
	acker      *acker
	tag        string
	deliveries <-chan amqp.Delivery
	connClosed chan *amqp.Error
	workCtx    context.Context
	abort      context.CancelFunc
	stopping   chan struct{} // closed on a stop request: pending retry waits give up
	gone       chan struct{} // closed by the first worker to find deliveries closed
	goneOnce   sync.Once
	limit      chan struct{} // closed by the worker that took the MaxMessages-th delivery
	quit       chan struct{} // closed to make the workers stop taking deliveries
	quitOnce   sync.Once
	handBack   atomic.Bool    // draining: deliveries still arriving go back to the broker untouched
	wg         sync.WaitGroup // the workers
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
			return false, fmt.Errorf("delivery channel of queue %s closed: %w", d.cfg.Queue, s.closeReason())
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
			q, err := s.ch.QueueDeclarePassive(d.cfg.Queue, true, false, false, false, nil)
			if err != nil {
				s.cut()
				return false, fmt.Errorf("check queue %s for messages: %w", d.cfg.Queue, err)
			}
			if q.Messages == 0 {
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
	s.acker.close()
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
		var m amqp.Delivery
		var ok bool
		select {
		case m, ok = <-s.deliveries:
		case <-s.quit:
			return
		}
		if !ok {
			s.goneOnce.Do(func() { close(s.gone) })
			return
		}
		n := d.taken.Add(1)
		if s.handBack.Load() || d.cfg.MaxMessages > 0 && n > int64(d.cfg.MaxMessages) {
			d.requeue(s.acker, m) // on its way when draining began, or over the limit
			continue
		}
		if n == int64(d.cfg.MaxMessages) {
			close(s.limit)
		}
		d.m.count(&d.m.consumed, d.m.consumedC)
		d.m.flight(1)
		d.handle(s.workCtx, s.stopping, s.ch, s.acker, t, m)
		d.m.flight(-1)
	}
}

// drain cancels the consumer and waits for in-flight work. Deliveries that were already on
// their way are processed when finishRest (the queue was empty: they are the last messages),
// otherwise handed back to the broker untouched.
func (s *session) drain(finishRest bool) error {
	d := s.d
	s.handBack.Store(!finishRest)
	if err := s.ch.Cancel(s.tag, false); err != nil {
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
	s.acker.close()
	if err := s.ch.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("close channel: %w", err)
	}
	st := d.m.stats()
	d.log.Info("drained", "consumed", st.Consumed, "acked", st.Acked, "retried", st.Retried,
		"deadLettered", st.DeadLettered, "requeued", st.Requeued)
	return nil
}

// closeReason says why deliveries stopped: the broker's connection.close reason when there is
// one (e.g. CONNECTION_FORCED on a broker shutdown).
func (s *session) closeReason() error {
	select {
	case e := <-s.connClosed:
		if e != nil {
			return e
		}
	case <-time.After(100 * time.Millisecond): // the close notification trails the delivery channel
	}
	if s.ch.IsClosed() {
		return amqp.ErrClosed
	}
	return errors.New("consumer cancelled by the broker (queue deleted?)")
}

// openChannel declares the queue and the dead-letter queue (durable; idempotent when the
// arguments match) and sets prefetch and publisher confirms.
func (d *dispatcher) openChannel(conn *amqp.Connection) (*amqp.Channel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	for _, q := range []struct {
		name string
		args amqp.Table
	}{{d.cfg.Queue, d.cfg.QueueArgs}, {d.cfg.DeadLetterQueue, nil}} {
		if _, err := ch.QueueDeclare(q.name, true, false, false, false, q.args); err != nil {
			return nil, classifyDeclare(q.name, err)
		}
	}
	if err := ch.Qos(d.cfg.Concurrency, 0, false); err != nil {
		return nil, fmt.Errorf("set prefetch %d: %w", d.cfg.Concurrency, err)
	}
	if err := ch.Confirm(false); err != nil {
		return nil, fmt.Errorf("enable publisher confirms: %w", err)
	}
	return ch, nil
}

// QueueMismatchError: the queue exists with arguments other than the ones declared.
type QueueMismatchError struct {
	Queue    string
	Argument string // the first differing argument, as the broker names it
	Detail   string // the broker's text, with both values
}

func (e *QueueMismatchError) Error() string {
	return fmt.Sprintf("queue %q already exists with different arguments: %s; declare it the way its producers do (--queue-arg %s=<value>) or delete the queue",
		e.Queue, e.Detail, e.Argument)
}

var inequivalentArg = regexp.MustCompile(`inequivalent arg '([^']*)'`)

func classifyDeclare(queue string, err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		switch ae.Code {
		case amqp.PreconditionFailed:
			arg := "<name>"
			if m := inequivalentArg.FindStringSubmatch(ae.Reason); m != nil {
				arg = m[1]
			}
			mm := &QueueMismatchError{Queue: queue, Argument: arg, Detail: ae.Reason}
			return &ConfigError{Field: "queue-arg", Reason: mm.Error(), Err: mm}
		case amqp.AccessRefused:
			return &ConfigError{Field: "amqp-url", Reason: fmt.Sprintf("the broker user may not declare or read queue %q: %s", queue, ae.Reason), Err: err}
		}
	}
	return fmt.Errorf("declare queue %s: %w", queue, err)
}

func classifyDial(err error) error {
	var ae *amqp.Error
	if errors.Is(err, amqp.ErrCredentials) || errors.Is(err, amqp.ErrSASL) ||
		errors.As(err, &ae) && (ae.Code == amqp.AccessRefused || ae.Code == amqp.NotAllowed) {
		return &ConfigError{Field: "amqp-url", Reason: fmt.Sprintf("RabbitMQ refused the connection (check user, password and vhost): %v", err), Err: err}
	}
	return fmt.Errorf("connect to RabbitMQ: %w", err)
}
