package amqpsource_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"sless.dev/sless/dispatcher"
	"sless.dev/sless/rules"
	"sless.dev/sless/test/testkit"
	"sless.dev/sless/triggers/rabbitmq/amqpsource"
)

// TestMain doubles as the dispatcher process for the crash and signal tests: with
// SLESS_TEST_DISPATCHER_CHILD set the test binary runs dispatcher.Run like `sless dispatcher`
// does and exits, so those tests kill a real process.
func TestMain(m *testing.M) {
	if spec := os.Getenv("SLESS_TEST_DISPATCHER_CHILD"); spec != "" {
		os.Exit(runChild(spec))
	}
	if os.Getenv("SLESS_TEST_FUNCTION_SERVER") != "" {
		os.Exit(serveFunction())
	}
	os.Exit(m.Run())
}

type childSpec struct {
	Queue, Target string
	Concurrency   int
	ExitWhenEmpty bool
	Backoff       time.Duration
}

func runChild(spec string) int {
	var s childSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	inv, err := dispatcher.NewHTTPInvoker(s.Target, "", s.Concurrency)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	_, err = amqpsource.Run(ctx, amqpsource.Config{
		URL: testkit.BrokerURL(), Queue: s.Queue, Config: dispatcher.Config{Function: dispatcher.FunctionRef{Namespace: "ns", Name: "fn"},
			Concurrency: s.Concurrency, ExitWhenEmpty: s.ExitWhenEmpty, IdleTimeout: 500 * time.Millisecond,
			Retry: dispatcher.RetryPolicy{Backoff: s.Backoff}, Invoker: inv},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func dial(t testing.TB) *amqp.Connection {
	t.Helper()
	url := testkit.AMQPURL(t)
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("connect to RabbitMQ at %s (set SLESS_TEST_AMQP_URL): %v", url, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func channel(t testing.TB, conn *amqp.Connection) *amqp.Channel {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// newQueue returns a unique durable queue name; it and its dead-letter queue are deleted
// when the test ends.
func newQueue(t testing.TB) string {
	t.Helper()
	url := testkit.AMQPURL(t)
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	q := "sless-test-" + t.Name() + "-" + hex.EncodeToString(b)
	t.Cleanup(func() {
		conn, err := amqp.Dial(url)
		if err != nil {
			t.Errorf("delete queue %s: %v", q, err)
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		for _, name := range []string{q, q + ".dlq"} {
			_, _ = ch.QueueDelete(name, false, false, false)
		}
	})
	return q
}

// publish declares q and publishes n messages, message id = index, waiting for confirms.
func publish(t *testing.T, q string, n int, mk func(i int) amqp.Publishing) {
	t.Helper()
	ch := channel(t, dial(t))
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	var confirms []*amqp.DeferredConfirmation
	for i := range n {
		p := amqp.Publishing{Body: []byte(fmt.Sprintf(`{"i":%d}`, i)), ContentType: "application/json", DeliveryMode: amqp.Persistent}
		if mk != nil {
			p = mk(i)
		}
		p.MessageId = strconv.Itoa(i)
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", q, false, false, p)
		if err != nil {
			t.Fatal(err)
		}
		confirms = append(confirms, dc)
	}
	for _, dc := range confirms {
		if !dc.Wait() {
			t.Fatal("broker nacked a test publish")
		}
	}
}

func depth(t *testing.T, q string) int {
	t.Helper()
	st, err := channel(t, dial(t)).QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("inspect queue %s: %v", q, err)
	}
	return st.Messages
}

// drainQueue takes every message of q with basic.get (acking them).
func drainQueue(t *testing.T, q string) []amqp.Delivery {
	t.Helper()
	ch := channel(t, dial(t))
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(q, true)
		if err != nil {
			t.Fatalf("get from %s: %v", q, err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

// fnServer is a real HTTP function on 127.0.0.1 that counts invocations per message id and
// answers with whatever respond returns for that id's nth invocation.
type fnServer struct {
	*httptest.Server
	mu      sync.Mutex
	calls   map[string]int
	headers map[string]http.Header
	bodies  map[string]string
	started int
	// unsigned counts calls that did not arrive signed with testKey.
	unsigned int
}

func newFnServer(t *testing.T, respond func(id string, n int) (int, time.Duration)) *fnServer {
	f := &fnServer{calls: map[string]int{}, headers: map[string]http.Header{}, bodies: map[string]string{}}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Amqp-Message-Id")
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.started++
		n := f.calls[id] + 1
		f.mu.Unlock()
		status, sleep := respond(id, n)
		time.Sleep(sleep)
		f.mu.Lock()
		f.calls[id] = n
		f.headers[id] = r.Header.Clone()
		f.bodies[id] = string(body)
		if !testkit.SignedWith(r, testKey) {
			f.unsigned++
		}
		f.mu.Unlock()
		w.WriteHeader(status)
		fmt.Fprint(w, "boom")
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fnServer) snapshot() (calls map[string]int, started int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := make(map[string]int, len(f.calls))
	for k, v := range f.calls {
		c[k] = v
	}
	return c, f.started
}

func ok(string, int) (int, time.Duration) { return http.StatusOK, 0 }

var testKey = rules.FunctionKey([]byte("dispatcher-test-master"), "ns", "fn")

func config(t *testing.T, q string, f *fnServer) amqpsource.Config {
	inv, err := dispatcher.NewHTTPInvoker(f.URL+"/", "", 16)
	if err != nil {
		t.Fatal(err)
	}
	inv.Key = testKey
	return amqpsource.Config{
		URL: testkit.AMQPURL(t), Queue: q, Config: dispatcher.Config{Function: dispatcher.FunctionRef{Namespace: "ns", Name: "fn"}, Trigger: "orders",
			Concurrency: 16, ExitWhenEmpty: true, IdleTimeout: 300 * time.Millisecond,
			Retry: dispatcher.RetryPolicy{Backoff: 10 * time.Millisecond}, Invoker: inv},
	}
}

func run(t *testing.T, cfg amqpsource.Config) dispatcher.Stats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := amqpsource.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Run did not exit on an empty queue")
	}
	return st
}

// useGlobal sets a global OpenTelemetry provider for t and puts the previous one back after.
func useGlobal[P any](t *testing.T, get func() P, set func(P), p P) {
	prev := get()
	set(p)
	t.Cleanup(func() { set(prev) })
}
