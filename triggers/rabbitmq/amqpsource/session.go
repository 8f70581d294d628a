package amqpsource

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"sless.dev/sless/dispatcher"
)

// session is one connection and channel consuming the source's queue; every delivery's
// outcome goes through its acker.
type session struct {
	src        *source
	conn       *amqp.Connection
	ch         *amqp.Channel
	acker      *acker
	log        *slog.Logger
	deliveries <-chan amqp.Delivery
	connClosed chan *amqp.Error
	closeOnce  sync.Once
	closeErr   error
}

// Next takes the next delivery straight from the consumer: the broker delivers at most
// prefetch unacked messages.
func (s *session) Next(quit <-chan struct{}) (dispatcher.Delivery, bool) {
	select {
	case m, ok := <-s.deliveries:
		if !ok {
			return nil, false
		}
		return &delivery{Delivery: m, s: s}, true
	case <-quit:
		return nil, false
	}
}

// Lost says why deliveries stopped: the broker's connection.close reason when there is one
// (e.g. CONNECTION_FORCED on a broker shutdown).
func (s *session) Lost() error {
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

func (s *session) Empty() (bool, error) {
	q, err := s.ch.QueueDeclarePassive(s.src.Queue, true, false, false, false, nil)
	return err == nil && q.Messages == 0, err
}

func (s *session) Cancel() error { return s.ch.Cancel(consumerTag, false) }

// Close flushes the acks, then closes the channel and the connection; the broker requeues
// whatever is still unacked.
func (s *session) Close() error {
	s.closeOnce.Do(func() {
		s.acker.close()
		if err := s.ch.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) {
			s.closeErr = fmt.Errorf("close channel: %w", err)
		}
		s.conn.Close()
	})
	return s.closeErr
}
