package devplane

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"sless.dev/sless/dispatcher"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/history"
	"sless.dev/sless/rules"
	"sless.dev/sless/triggers/rabbitmq/amqpsource"
)

// Asynchronous invocations in sless dev. The records live in the data dir (asyncStore) unless
// the history is in PostgreSQL. The queue is the broker when sless dev has one — the same
// Publisher and dispatcher as a cluster — else request files in the data dir
// (<data-dir>/async/queue/<ns>/<function>/<id>.json), one runner per function replaying
// them through dispatcher.AsyncRunner. Either way an accepted invocation survives a restart.

// maxAsyncPerNamespace bounds the records a namespace keeps: the oldest final ones go first;
// when all are still queued a new call is refused.
const maxAsyncPerNamespace = 20000

// asyncStore is a history.AsyncStore in files, one per invocation, read into memory at start.
type asyncStore struct {
	dir  string
	mu   sync.Mutex
	byID map[string]*history.AsyncInvocation // <ns>/<id>
	keys map[string]string                   // <ns>/<function>/<idempotency key> → id
}

var _ history.AsyncStore = (*asyncStore)(nil)

func openAsyncStore(dir string) (*asyncStore, error) {
	s := &asyncStore{dir: dir, byID: map[string]*history.AsyncInvocation{}, keys: map[string]string{}}
	paths, err := filepath.Glob(filepath.Join(dir, "*", "*.json"))
	if err != nil {
		return nil, err
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		var inv history.AsyncInvocation
		if err == nil {
			err = json.Unmarshal(data, &inv)
		}
		if err != nil || !history.ValidAsyncID(inv.ID) {
			return nil, fmt.Errorf("reading asynchronous invocation %s: %v; move the file away to start without it", p, cmp.Or(err, errors.New("no valid id")))
		}
		s.index(&inv)
	}
	return s, nil
}

func (s *asyncStore) index(inv *history.AsyncInvocation) {
	s.byID[inv.Namespace+"/"+inv.ID] = inv
	if inv.IdempotencyKey != "" {
		s.keys[inv.Namespace+"/"+inv.Function+"/"+inv.IdempotencyKey] = inv.ID
	}
}

func (s *asyncStore) unindex(inv *history.AsyncInvocation) {
	delete(s.byID, inv.Namespace+"/"+inv.ID)
	if inv.IdempotencyKey != "" {
		delete(s.keys, inv.Namespace+"/"+inv.Function+"/"+inv.IdempotencyKey)
	}
}

func (s *asyncStore) path(ns, id string) string { return filepath.Join(s.dir, ns, id+".json") }

func (s *asyncStore) save(inv *history.AsyncInvocation) error {
	data, err := json.Marshal(inv)
	if err != nil {
		return err
	}
	return writeAtomic(s.path(inv.Namespace, inv.ID), data)
}

// CreateAsync implements history.AsyncStore.
func (s *asyncStore) CreateAsync(_ context.Context, inv history.AsyncInvocation) (history.AsyncInvocation, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if inv.IdempotencyKey != "" {
		if id, ok := s.keys[inv.Namespace+"/"+inv.Function+"/"+inv.IdempotencyKey]; ok {
			return *s.byID[inv.Namespace+"/"+id], false, nil
		}
	}
	if err := s.makeRoom(inv.Namespace); err != nil {
		return inv, false, err
	}
	if inv.ID == "" {
		inv.ID = history.NewAsyncID()
	}
	inv.Created = time.Now().UTC()
	inv.Updated = inv.Created
	if err := s.save(&inv); err != nil {
		return inv, false, err
	}
	s.index(&inv)
	return inv, true, nil
}

// makeRoom removes the oldest final records of ns beyond maxAsyncPerNamespace-1; call with
// mu held.
func (s *asyncStore) makeRoom(ns string) error {
	var mine, final []*history.AsyncInvocation
	for _, inv := range s.byID {
		if inv.Namespace == ns {
			mine = append(mine, inv)
			if inv.Final() {
				final = append(final, inv)
			}
		}
	}
	excess := len(mine) - (maxAsyncPerNamespace - 1)
	if excess <= 0 {
		return nil
	}
	if len(final) < excess {
		return &backend.QuotaError{Kind: "queued asynchronous invocation", Namespace: ns, Limit: maxAsyncPerNamespace}
	}
	slices.SortFunc(final, func(a, b *history.AsyncInvocation) int { return a.Updated.Compare(b.Updated) })
	for _, inv := range final[:excess] {
		if err := removeDurably(s.path(ns, inv.ID)); err != nil {
			return err
		}
		s.unindex(inv)
	}
	return nil
}

// GetAsync implements history.AsyncStore.
func (s *asyncStore) GetAsync(_ context.Context, ns, id string) (history.AsyncInvocation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if inv, ok := s.byID[ns+"/"+id]; ok {
		return *inv, nil
	}
	return history.AsyncInvocation{}, history.ErrAsyncNotFound
}

// UpdateAsync implements history.AsyncStore.
func (s *asyncStore) UpdateAsync(_ context.Context, ns, id string, change func(*history.AsyncInvocation)) (history.AsyncInvocation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.byID[ns+"/"+id]
	if !ok {
		return history.AsyncInvocation{}, history.ErrAsyncNotFound
	}
	next := *cur
	change(&next)
	next.Updated = time.Now().UTC()
	if err := s.save(&next); err != nil {
		return *cur, err
	}
	*cur = next
	return next, nil
}

// DeleteAsync implements history.AsyncStore.
func (s *asyncStore) DeleteAsync(_ context.Context, ns, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	inv, ok := s.byID[ns+"/"+id]
	if !ok {
		return nil
	}
	if err := removeDurably(s.path(ns, id)); err != nil {
		return err
	}
	s.unindex(inv)
	return nil
}

// ListAsync implements history.AsyncStore.
func (s *asyncStore) ListAsync(_ context.Context, ns, function, status string, limit int) ([]history.AsyncInvocation, error) {
	s.mu.Lock()
	var out []history.AsyncInvocation
	for _, inv := range s.byID {
		if inv.Namespace == ns && (function == "" || inv.Function == function) && (status == "" || inv.Status == status) {
			out = append(out, *inv)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b history.AsyncInvocation) int {
		return cmp.Or(b.Created.Compare(a.Created), strings.Compare(b.ID, a.ID))
	})
	return out[:min(len(out), limit)], nil
}

// fileQueue is the durable queue of sless dev without a broker: Enqueue stores the record,
// then the request file, then wakes the function's runner.
type fileQueue struct {
	history.AsyncStore
	dir string

	mu   sync.Mutex
	wake map[string]chan struct{} // function key → its runner's signal
}

func (q *fileQueue) dirOf(ns, fn string) string { return filepath.Join(q.dir, ns, fn) }

// Enqueue implements backend.AsyncInvoker.
func (q *fileQueue) Enqueue(ctx context.Context, req history.AsyncRequest) (history.AsyncInvocation, bool, error) {
	inv, created, err := q.CreateAsync(ctx, history.NewAsyncInvocation(req))
	if err != nil || !(created || inv.Unstarted()) {
		return inv, false, err
	}
	// A repeated key whose invocation never started writes its file again: a crash may have
	// come between the record and the file.
	data, err := json.Marshal(req)
	if err == nil {
		err = writeAtomic(filepath.Join(q.dirOf(req.Namespace, req.Function), inv.ID+".json"), data)
	}
	if err != nil {
		if created {
			_ = q.DeleteAsync(context.WithoutCancel(ctx), req.Namespace, inv.ID)
		}
		return inv, false, fmt.Errorf("queue the invocation: %w", err)
	}
	q.signal(objectKey(req.Namespace, req.Function))
	return inv, created, nil
}

func (q *fileQueue) signal(key string) {
	q.mu.Lock()
	c := q.wake[key]
	q.mu.Unlock()
	if c != nil {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// pending lists the queued invocation IDs of a function, oldest file first.
func (q *fileQueue) pending(ns, fn string) ([]string, error) {
	entries, err := os.ReadDir(q.dirOf(ns, fn))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), ".json"); ok && history.ValidAsyncID(id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

func (q *fileQueue) request(ns, fn, id string) (history.AsyncRequest, error) {
	var req history.AsyncRequest
	data, err := os.ReadFile(filepath.Join(q.dirOf(ns, fn), id+".json"))
	if err == nil {
		err = json.Unmarshal(data, &req)
	}
	return req, err
}

func (q *fileQueue) done(ns, fn, id string) error {
	return removeDurably(filepath.Join(q.dirOf(ns, fn), id+".json"))
}

// asyncRunnerConcurrency is how many attempts of one function's asynchronous invocations run
// at once in sless dev (the pool scales the function under them as for any caller).
const asyncRunnerConcurrency = 16

// asyncRunnerKey names a function's asynchronous runner among the trigger runners.
func asyncRunnerKey(fnKey string) string { return "async:" + fnKey }

// asyncRun is everything a function's asynchronous runner depends on; a change to any of it
// restarts the runner.
type asyncRun struct {
	Queue, DeadLetterQueue string
	MaxAttempts, BackoffMs int32
	Host                   string
	Timeout                time.Duration
	MemoryMB               int32
}

// setAsyncRunner starts, restarts or stops the runner of fn's asynchronous invocations.
func (b *Backend) setAsyncRunner(key string, fn api.Function, host string) {
	var (
		c   asyncRun
		cfg any
	)
	if p := fn.Async; p.Enabled && host != "" && b.async != nil {
		c = asyncRun{Queue: rules.AsyncQueue(fn.Namespace, fn.Name),
			DeadLetterQueue: rules.AsyncDeadLetterQueue(fn.Namespace, fn.Name, p.DeadLetterQueue),
			MaxAttempts:     p.MaxAttempts, BackoffMs: p.BackoffMs, Host: host, Timeout: rules.InvocationDeadline(fn.TimeoutSec),
			MemoryMB: fn.MemoryMB}
		cfg = c
	}
	b.runners.set(b.ctx, asyncRunnerKey(key), cfg, func(ctx context.Context) {
		ref := dispatcher.FunctionRef{Namespace: fn.Namespace, Name: fn.Name, MemoryMB: c.MemoryMB}
		dc := dispatcher.Config{Function: ref,
			Retry:   dispatcher.RetryPolicy{MaxAttempts: int(c.MaxAttempts), Backoff: time.Duration(c.BackoffMs) * time.Millisecond},
			Timeout: c.Timeout, Invoker: b.invoker(c.Host), Recorder: b.opts.Recorder, Async: b.asyncStore, Logger: b.log,
			Concurrency: asyncRunnerConcurrency,
			// Callback receivers on the developer's machine (the gateway still allows only
			// --async-callback-hosts).
			CallbackPrivateAddresses: true}
		if b.files == nil {
			if _, err := amqpsource.Run(ctx, amqpsource.Config{URL: b.opts.AMQPURL, Queue: c.Queue, DeadLetterQueue: c.DeadLetterQueue,
				ConnectionName: "sless dev async " + key, Config: dc}); err != nil && ctx.Err() == nil {
				b.log.Error("asynchronous invocations stopped", "function", key, "error", err)
			}
			return
		}
		b.runFileQueue(ctx, key, dc)
	})
}

// runFileQueue replays a function's request files until ctx ends, each invocation in a
// goroutine of its own that holds one of asyncRunnerConcurrency slots while it runs.
func (b *Backend) runFileQueue(ctx context.Context, key string, dc dispatcher.Config) {
	runner, err := dispatcher.NewAsyncRunner(dc)
	if err != nil {
		b.log.Error("asynchronous invocations stopped", "function", key, "error", err)
		return
	}
	defer runner.Wait() // after the attempts below: their callbacks are delivered before Close returns
	ns, name := splitKey(key)
	wake := make(chan struct{}, 1)
	b.files.mu.Lock()
	b.files.wake[key] = wake
	b.files.mu.Unlock()
	defer func() {
		b.files.mu.Lock()
		delete(b.files.wake, key)
		b.files.mu.Unlock()
	}()
	var (
		mu       sync.Mutex
		inFlight = map[string]bool{}
		wg       sync.WaitGroup
		slots    = make(chan struct{}, asyncRunnerConcurrency)
	)
	defer wg.Wait()
	for {
		ids, err := b.files.pending(ns, name)
		if err != nil {
			b.log.Warn("Warning: cannot read the asynchronous queue", "function", key, "error", err)
		}
		for _, id := range ids {
			mu.Lock()
			busy := inFlight[id]
			inFlight[id] = true
			mu.Unlock()
			if busy {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if b.replay(ctx, runner, ns, name, id, slots) {
					mu.Lock()
					delete(inFlight, id)
					mu.Unlock()
				}
			}()
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-time.After(5 * time.Second): // files of a crashed attempt, a failed signal
		}
	}
}

// replay runs one queued invocation to its outcome (or until ctx ends); it reports whether
// the invocation left the queue.
func (b *Backend) replay(ctx context.Context, runner *dispatcher.AsyncRunner, ns, name, id string, slots chan struct{}) bool {
	req, err := b.files.request(ns, name, id)
	if errors.Is(err, fs.ErrNotExist) {
		return true // finished since the directory was listed
	}
	if err != nil {
		b.log.Warn("Warning: an asynchronous request file cannot be read; dropping it", "function", ns+"/"+name, "invocation", id, "error", err)
		b.settleUnreadable(ns, name, id, err)
		return true
	}
	inv, err := b.asyncStore.GetAsync(ctx, ns, id)
	switch {
	case errors.Is(err, history.ErrAsyncNotFound):
		return b.files.done(ns, name, id) == nil
	case err != nil:
		return false // the store is down; the next pass tries again
	case inv.Final():
		return b.files.done(ns, name, id) == nil // settled before a crash removed the file
	}
	attempt := inv.Attempts + 1
	if inv.Status == history.AsyncRunning {
		attempt = inv.Attempts // interrupted mid-attempt: at least once, so that attempt again
	}
	for attempt > 0 {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return false
		}
		next, wait := runner.Attempt(ctx, id, req, attempt)
		<-slots
		if next == 0 {
			return b.files.done(ns, name, id) == nil
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
		attempt = next
	}
	return false
}

// settleUnreadable fails an invocation whose request file is damaged, so it neither waits
// forever nor blocks the queue.
func (b *Backend) settleUnreadable(ns, name, id string, cause error) {
	_, _ = b.asyncStore.UpdateAsync(b.ctx, ns, id, func(inv *history.AsyncInvocation) {
		inv.Status, inv.Error = history.AsyncFailed, "the queued request could not be read back: "+cause.Error()
	})
	_ = b.files.done(ns, name, id)
}

// dropAsync fails the queued invocations of a deleted function: nothing will run them.
func (b *Backend) dropAsync(key string) {
	if b.files == nil {
		return
	}
	ns, name := splitKey(key)
	ids, _ := b.files.pending(ns, name)
	for _, id := range ids {
		_, _ = b.asyncStore.UpdateAsync(b.ctx, ns, id, func(inv *history.AsyncInvocation) {
			inv.Status, inv.Error = history.AsyncFailed, "the function was deleted before the invocation ran"
		})
		_ = b.files.done(ns, name, id)
	}
}

// openAsync sets up the records and the queue of asynchronous invocations.
func (b *Backend) openAsync() error {
	b.asyncStore = b.opts.AsyncStore
	if b.asyncStore == nil {
		s, err := openAsyncStore(filepath.Join(b.opts.DataDir, "async", "records"))
		if err != nil {
			return err
		}
		b.asyncStore = s
	}
	if b.opts.AMQPURL != "" {
		b.async = &amqpsource.Publisher{URL: b.opts.AMQPURL, AsyncStore: b.asyncStore, Logger: b.log}
		return nil
	}
	b.files = &fileQueue{AsyncStore: b.asyncStore, dir: filepath.Join(b.opts.DataDir, "async", "queue"), wake: map[string]chan struct{}{}}
	b.async = b.files
	return nil
}

// Async is what the gateway queues asynchronous invocations with.
func (b *Backend) Async() backend.AsyncInvoker { return b.async }
