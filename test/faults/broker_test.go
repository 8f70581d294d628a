//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// broker is the suite's own RabbitMQ node: its own epmd, node name, AMQP and distribution
// ports and data directory, so stopping it never touches the machine's broker (which other
// test packages use meanwhile).
type broker struct {
	dir  string
	url  string
	env  []string
	epmd *proc
	node *proc
}

// startBroker writes the node's configuration and starts it.
func startBroker(dir string) (*broker, error) {
	var ports [3]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	amqpPort, distPort, epmdPort := ports[0], ports[1], ports[2]
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("broker directory: %w", err)
	}
	files := map[string]string{
		// Only this listener: the machine's /etc/rabbitmq/rabbitmq.conf names port 5672.
		"rabbitmq.conf":   fmt.Sprintf("listeners.tcp.1 = 127.0.0.1:%d\n", amqpPort),
		"enabled_plugins": "[].\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return nil, fmt.Errorf("broker configuration: %w", err)
		}
	}
	b := &broker{dir: dir, url: fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", amqpPort), env: []string{
		"RABBITMQ_NODENAME=sless-faults-" + strconv.Itoa(os.Getpid()) + "@localhost",
		"RABBITMQ_DIST_PORT=" + strconv.Itoa(distPort),
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
		"ERL_EPMD_PORT=" + strconv.Itoa(epmdPort),
		"RABBITMQ_CONFIG_FILE=" + filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE=" + filepath.Join(dir, "advanced.config"),
		"RABBITMQ_CONF_ENV_FILE=" + filepath.Join(dir, "rabbitmq-env.conf"), // none: not the machine's
		"RABBITMQ_ENABLED_PLUGINS_FILE=" + filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_MNESIA_BASE=" + filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE=" + filepath.Join(dir, "log"),
		"RABBITMQ_LOGS=-",
		"HOME=" + dir, // the Erlang cookie
	}}
	epmd, err := startProc(procSpec{name: "epmd", argv: []string{"epmd", "-port", strconv.Itoa(epmdPort), "-address", "127.0.0.1"}})
	if err != nil {
		return nil, err
	}
	b.epmd = epmd
	if err := b.start(); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

// start boots the node and waits until it accepts AMQP connections.
func (b *broker) start() error {
	node, err := startProc(procSpec{name: "rabbitmq", argv: []string{rabbitmqServer()}, env: b.env, dir: b.dir,
		orphanSignal: syscall.SIGTERM}) // the script's TERM trap stops the Erlang VM it started
	if err != nil {
		return err
	}
	b.node = node
	if err := until(2*time.Minute, node, b.up); err != nil {
		return fmt.Errorf("private RabbitMQ did not start: %w", err)
	}
	return nil
}

// stop shuts the node down gracefully, as `systemctl stop rabbitmq-server` would.
func (b *broker) stop() error {
	return b.node.signal(syscall.SIGTERM, time.Minute)
}

func (b *broker) close() {
	if b.node != nil {
		_ = b.stop()
	}
	_ = b.epmd.signal(syscall.SIGKILL, 5*time.Second)
}

func (b *broker) up() bool {
	conn, err := amqp.Dial(b.url)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// rabbitmqServer is the server script itself: Debian's /usr/sbin wrapper re-executes it
// through su as the rabbitmq user, which could not read the suite's directory.
func rabbitmqServer() string {
	if _, err := os.Stat("/usr/lib/rabbitmq/bin/rabbitmq-server"); err == nil {
		return "/usr/lib/rabbitmq/bin/rabbitmq-server"
	}
	return "rabbitmq-server"
}

// channel opens a connection and a channel to the suite's broker for one test.
func (b *broker) channel(t *testing.T) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(b.url)
	if err != nil {
		t.Fatalf("connect to the private broker: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("open a channel: %v", err)
	}
	return ch
}

// declareQueue declares queue and its dead-letter queue as the dispatcher does (durable, no
// arguments), so messages published before a consumer exists are kept.
func (b *broker) declareQueue(t *testing.T, queue string) {
	t.Helper()
	ch := b.channel(t)
	for _, q := range []string{queue, queue + ".dlq"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatalf("declare %s: %v", q, err)
		}
	}
}

// queueDepth is the number of ready messages of queue.
func (b *broker) queueDepth(t *testing.T, queue string) int {
	t.Helper()
	q, err := b.channel(t).QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("inspect %s: %v", queue, err)
	}
	return q.Messages
}

// publication publishes n persistent messages {"id":"<prefix>-<i>"} with publisher confirms,
// at most rate per second (0: as fast as the broker confirms).
type publication struct {
	queue, prefix string
	n, rate       int

	mu   sync.Mutex
	sent int
	done chan struct{}
	err  error
}

func (b *broker) publish(t *testing.T, queue, prefix string, n, rate int) *publication {
	t.Helper()
	ch := b.channel(t)
	if err := ch.Confirm(false); err != nil {
		t.Fatalf("confirm mode: %v", err)
	}
	p := &publication{queue: queue, prefix: prefix, n: n, rate: rate, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.err = p.run(ch)
	}()
	return p
}

func (p *publication) run(ch *amqp.Channel) error {
	start := time.Now()
	confirms := make([]*amqp.DeferredConfirmation, 0, p.n)
	for i := range p.n {
		if p.rate > 0 {
			time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(p.rate))))
		}
		body, _ := json.Marshal(map[string]string{"id": invocationID(p.prefix, i)})
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", p.queue, false, false, amqp.Publishing{
			ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: invocationID(p.prefix, i), Body: body,
		})
		if err != nil {
			return fmt.Errorf("publish message %d to %s: %w", i, p.queue, err)
		}
		confirms = append(confirms, dc)
		p.mu.Lock()
		p.sent++
		p.mu.Unlock()
	}
	for i, dc := range confirms {
		if !dc.Wait() {
			return fmt.Errorf("the broker nacked message %d of %s", i, p.queue)
		}
	}
	return nil
}

// published is how many messages were handed to the broker so far.
func (p *publication) published() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent
}

// wait waits until every message was confirmed.
func (p *publication) wait(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("publishing to %s did not finish within 2m", p.queue)
	}
	if p.err != nil {
		t.Fatal(p.err)
	}
}

func invocationID(prefix string, i int) string { return prefix + "-" + strconv.Itoa(i) }
