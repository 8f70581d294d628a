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
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"sless.dev/sless/dispatcher"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/history"
	"sless.dev/sless/rules"
	"sless.dev/sless/test/pgtest"
	"sless.dev/sless/test/testkit"
	"sless.dev/sless/triggers/rabbitmq/amqpsource"
)

// Callbacks of asynchronous invocations, end to end: the gateway's Publisher queues on the
// real broker with records in the real PostgreSQL, dispatcher.Run replays them against a
// function on 127.0.0.1 and POSTs each outcome to receivers on 127.0.0.1.

// receiver is a callback target: it keeps what was POSTed, answering after delay with
// status (and Location, for a redirect).
type receiver struct {
	*httptest.Server
	delay    time.Duration
	status   int
	location string

	mu    sync.Mutex
	posts []post
}

type post struct {
	method, contentType string
	inv                 api.AsyncInvocation
	answered            time.Time
}

func newReceiver(t *testing.T, status int, delay time.Duration) *receiver {
	r := &receiver{status: status, delay: delay}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var inv api.AsyncInvocation
		if err := json.Unmarshal(body, &inv); err != nil {
			t.Errorf("callback body %q: %v", body, err)
		}
		time.Sleep(r.delay)
		if r.location != "" {
			w.Header().Set("Location", r.location)
		}
		w.WriteHeader(r.status)
		r.mu.Lock()
		r.posts = append(r.posts, post{method: req.Method, contentType: req.Header.Get("Content-Type"), inv: inv, answered: time.Now()})
		r.mu.Unlock()
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) got() []post {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]post(nil), r.posts...)
}

// asyncSetup is one test's function "fn" in a namespace of its own: its queues (deleted at
// the end), the store and a Publisher.
type asyncSetup struct {
	ns    string
	store *history.Postgres
	pub   *amqpsource.Publisher
	fnURL string
}

func newAsyncSetup(t *testing.T) *asyncSetup {
	t.Helper()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	s := &asyncSetup{ns: "cb-" + hex.EncodeToString(b)}
	store, err := history.OpenPostgres(pgtest.NewDatabase(t, "dispatcher_callbacks"), history.PostgresOptions{FlushInterval: 20 * time.Millisecond, WriteTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("PostgreSQL: %v", err)
	}
	s.store = store
	url := testkit.AMQPURL(t)
	s.pub = &amqpsource.Publisher{URL: url, AsyncStore: store}
	t.Cleanup(func() {
		s.pub.Close()
		_ = store.Close(context.Background())
		conn, err := amqp.Dial(url)
		if err != nil {
			return
		}
		defer conn.Close()
		if ch, err := conn.Channel(); err == nil {
			q := rules.AsyncQueue(s.ns, "fn")
			_, _ = ch.QueueDelete(q, false, false, false)
			_, _ = ch.QueueDelete(rules.AsyncDeadLetterQueue(s.ns, "fn", ""), false, false, false)
		}
	})
	// The function: /ok answers 200 "hello <body>", anything else 500 "boom".
	fn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/ok" {
			http.Error(w, "boom", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "hello %s", body)
	}))
	t.Cleanup(fn.Close)
	s.fnURL = fn.URL
	return s
}

// enqueue queues a call of path with body whose outcome goes to callback.
func (s *asyncSetup) enqueue(t *testing.T, path, body, callback string) history.AsyncInvocation {
	t.Helper()
	inv, created, err := s.pub.Enqueue(context.Background(), history.AsyncRequest{
		Namespace: s.ns, Function: "fn", Method: http.MethodPost, Path: path, Body: []byte(body),
		Header: map[string][]string{"Content-Type": {"text/plain"}}, CallbackURL: callback, MaxAttempts: 1})
	if err != nil || !created {
		t.Fatalf("enqueue: created %v, %v", created, err)
	}
	return inv
}

// run drains the function's queue with dispatcher.Run (exiting once it is empty) and returns
// when Run did.
func (s *asyncSetup) run(t *testing.T, private bool) time.Time {
	t.Helper()
	inv, err := dispatcher.NewHTTPInvoker(s.fnURL+"/", "", 4)
	if err != nil {
		t.Fatal(err)
	}
	q := rules.AsyncQueue(s.ns, "fn")
	run(t, amqpsource.Config{
		URL: testkit.AMQPURL(t), Queue: q, DeadLetterQueue: rules.AsyncDeadLetterQueue(s.ns, "fn", ""),
		Config: dispatcher.Config{Function: dispatcher.FunctionRef{Namespace: s.ns, Name: "fn"}, Concurrency: 4,
			ExitWhenEmpty: true, IdleTimeout: 300 * time.Millisecond, Retry: dispatcher.RetryPolicy{MaxAttempts: 1},
			Invoker: inv, Async: s.store, CallbackPrivateAddresses: private},
	})
	return time.Now()
}

func (s *asyncSetup) record(t *testing.T, id string) history.AsyncInvocation {
	t.Helper()
	inv, err := s.store.GetAsync(context.Background(), s.ns, id)
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

// TestCallbackDeliversTheOutcome: the final invocation — id, status, HTTP status, result or
// error, as GET /v1/namespaces/{ns}/invocations/{id} reads it — is POSTed as JSON to the
// allowed host, once, for a success and a failure alike.
func TestCallbackDeliversTheOutcome(t *testing.T) {
	s := newAsyncSetup(t)
	hook := newReceiver(t, http.StatusNoContent, 0)
	good := s.enqueue(t, "/ok", "world", hook.URL+"/hook?kind=good")
	bad := s.enqueue(t, "/fail", "x", hook.URL+"/hook?kind=bad")
	s.run(t, false)

	posts := hook.got()
	if len(posts) != 2 {
		t.Fatalf("want 2 callbacks, got %d: %+v", len(posts), posts)
	}
	byID := map[string]api.AsyncInvocation{}
	for _, p := range posts {
		if p.method != http.MethodPost || p.contentType != "application/json" {
			t.Errorf("callback %s with Content-Type %q", p.method, p.contentType)
		}
		byID[p.inv.ID] = p.inv
	}
	g, ok := byID[good.ID]
	if !ok || g.Status != history.AsyncSucceeded || g.HTTPStatus != http.StatusOK || g.Result != "hello world" ||
		g.Function != "fn" || g.Attempts != 1 || g.Error != "" || !strings.HasPrefix(g.ContentType, "text/plain") {
		t.Errorf("success callback: %+v", g)
	}
	b, ok := byID[bad.ID]
	if !ok || b.Status != history.AsyncFailed || b.HTTPStatus != http.StatusInternalServerError || b.Error == "" || b.Attempts != 1 {
		t.Errorf("failure callback: %+v", b)
	}
	// What was POSTed is the record as stored (PostgreSQL keeps microseconds).
	if rec := s.record(t, good.ID).API(); rec.Status != g.Status || rec.Result != g.Result || rec.UpdatedAt.Sub(g.UpdatedAt).Abs() > time.Millisecond {
		t.Errorf("callback %+v differs from the record %+v", g, rec)
	}
}

// TestCallbackRedirectIsNotFollowed: an allowed host answering a redirect to another server
// does not get the dispatcher to POST there; the redirect is a failed delivery, tried twice.
func TestCallbackRedirectIsNotFollowed(t *testing.T) {
	s := newAsyncSetup(t)
	inner := newReceiver(t, http.StatusOK, 0) // stands for an in-cluster address
	for _, code := range []int{http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		hook := newReceiver(t, code, 0)
		hook.location = inner.URL + "/internal"
		s.enqueue(t, "/ok", "r", hook.URL+"/hook")
		s.run(t, false)
		if n := len(hook.got()); n != 2 {
			t.Errorf("%d: the allowed host got %d POSTs, want 2 (a redirect is a failure, retried once)", code, n)
		}
	}
	if got := inner.got(); len(got) != 0 {
		t.Fatalf("the redirect target got %d requests: %+v", len(got), got)
	}
}

// TestCallbackToAPrivateNameIsRefused: a callback host name that resolves to loopback
// ("localhost") is not dialed unless the configuration allows private addresses (sless dev
// does); the address itself, allowed literally, is.
func TestCallbackToAPrivateNameIsRefused(t *testing.T) {
	s := newAsyncSetup(t)
	hook := newReceiver(t, http.StatusOK, 0)
	port := hook.URL[strings.LastIndex(hook.URL, ":")+1:]
	byName := s.enqueue(t, "/ok", "n", "http://localhost:"+port+"/hook")
	s.run(t, false)
	if got := hook.got(); len(got) != 0 {
		t.Fatalf("a name resolving to loopback was dialed: %+v", got)
	}
	if rec := s.record(t, byName.ID); rec.Status != history.AsyncSucceeded {
		t.Fatalf("a refused callback must leave the outcome as it is: %+v", rec)
	}
	s.enqueue(t, "/ok", "literal", hook.URL+"/hook")
	s.enqueue(t, "/ok", "name", "http://localhost:"+port+"/hook")
	s.run(t, false)
	s.enqueue(t, "/ok", "private ok", "http://localhost:"+port+"/hook")
	s.run(t, true)
	results := map[string]int{}
	for _, p := range hook.got() {
		results[p.inv.Result]++
	}
	if results["hello literal"] != 1 || results["hello private ok"] != 1 || len(results) != 2 {
		t.Fatalf("callbacks delivered: %v; want the literal address and, with CallbackPrivateAddresses, the name, once each", results)
	}
}

// TestPendingCallbackDeliveredBeforeRunReturns: a callback still under way when the queue
// empties is delivered before Run returns — a --exit-when-empty Job would otherwise exit
// under it.
func TestPendingCallbackDeliveredBeforeRunReturns(t *testing.T) {
	s := newAsyncSetup(t)
	hook := newReceiver(t, http.StatusOK, 2*time.Second) // longer than the idle timeout and drain
	inv := s.enqueue(t, "/ok", "late", hook.URL+"/hook")
	returned := s.run(t, false)
	posts := hook.got()
	if len(posts) != 1 || posts[0].inv.ID != inv.ID || posts[0].inv.Status != history.AsyncSucceeded {
		t.Fatalf("when Run returned the callback had not been delivered: %+v", posts)
	}
	if !posts[0].answered.Before(returned) {
		t.Fatalf("Run returned at %s, before the callback was answered at %s", returned, posts[0].answered)
	}
}
