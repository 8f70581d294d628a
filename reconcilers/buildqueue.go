package reconcilers

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"sless.dev/sless/rules"
	"sless.dev/sless/scaling"
)

// buildQueue caps the builds that run at once (BuildOptions.MaxConcurrent). A Job's deadline
// runs from its creation, pending pods included, so builds beyond what the build namespace
// runs at once would spend their deadline waiting; held here they spend none. Waiting builds
// start oldest first. The queue lives in the operator's memory: after a restart the waiting
// objects line up again as they are reconciled.
type buildQueue struct {
	max    int
	reader client.Reader // the cache, which holds the build Jobs
	ns     string

	mu      sync.Mutex
	waiting map[waiterKey]*waiter
	started map[string]started // build Job name → created, perhaps not in the cache yet
}

// waiterKey is the object waiting, of its kind (scaling.LabelFunction or scaling.LabelJob).
type waiterKey struct {
	label string
	types.NamespacedName
}

type waiter struct {
	since, asked time.Time
}

type started struct {
	at  time.Time
	uid types.UID // "" until the create returned
}

const (
	// queueRecheck is the safety net under the wake-ups: a waiter asks again this often.
	queueRecheck = 30 * time.Second
	// waiterExpiry drops the place of an object that stopped asking (its source went, or it
	// was deleted while the operator was not looking).
	waiterExpiry = 2 * queueRecheck
	// startedExpiry bounds how long a created Job counts before the cache shows it.
	startedExpiry = time.Minute
)

func newBuildQueue(max int, reader client.Reader, ns string) *buildQueue {
	if max <= 0 {
		return nil
	}
	return &buildQueue{max: max, reader: reader, ns: ns, waiting: map[waiterKey]*waiter{}, started: map[string]started{}}
}

// queuePlace is where a build that has not started stands; the owner's status shows it.
type queuePlace struct{ running, max, ahead int }

func (e queuePlace) String() string {
	return fmt.Sprintf("%s: %d of %d builds running (operator --max-concurrent-builds), %d waiting ahead of this one", rules.BuildSlotWait, e.running, e.max, e.ahead)
}

// admit lets t create its build Job job now, or keeps t's place and says why not. A nil
// queue admits every build. An admitted build reports its Job with created.
func (q *buildQueue) admit(ctx context.Context, job string, t scaling.BuildTarget) (*queuePlace, error) {
	if q == nil {
		return nil, nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	running, err := q.running(ctx)
	if err != nil {
		return nil, fmt.Errorf("counting running builds: %w", err)
	}
	now := time.Now()
	key := waiterKey{t.Label, types.NamespacedName{Namespace: t.Namespace, Name: t.Name}}
	w := q.waiting[key]
	if w == nil {
		w = &waiter{since: now}
		q.waiting[key] = w
	}
	w.asked = now
	ahead := 0
	for k, o := range q.waiting {
		switch {
		case now.Sub(o.asked) > waiterExpiry:
			delete(q.waiting, k)
		case o.since.Before(w.since):
			ahead++
		}
	}
	if ahead < q.max-running {
		delete(q.waiting, key)
		q.started[job] = started{at: now}
		return nil, nil
	}
	return &queuePlace{running: running, max: q.max, ahead: ahead}, nil
}

// created records the Job an admitted build made ("" if the create failed), so it counts
// until the cache shows it.
func (q *buildQueue) created(job string, uid types.UID) {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if uid == "" {
		delete(q.started, job)
		return
	}
	q.started[job] = started{at: q.started[job].at, uid: uid}
}

// forget drops a deleted object's place.
func (q *buildQueue) forget(t scaling.BuildTarget) {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.waiting, waiterKey{t.Label, types.NamespacedName{Namespace: t.Namespace, Name: t.Name}})
}

// running counts the build Jobs that have not finished, with those just created.
func (q *buildQueue) running(ctx context.Context) (int, error) {
	var jobs batchv1.JobList
	if err := q.reader.List(ctx, &jobs, client.InNamespace(q.ns), client.HasLabels{scaling.LabelSource}); err != nil {
		return 0, err
	}
	n := 0
	for i := range jobs.Items {
		j := &jobs.Items[i]
		if s, ok := q.started[j.Name]; ok && s.uid == j.UID {
			delete(q.started, j.Name)
		}
		if !jobCondition(j, batchv1.JobComplete) && !jobCondition(j, batchv1.JobFailed) {
			n++
		}
	}
	for name, s := range q.started {
		if time.Since(s.at) > startedExpiry {
			delete(q.started, name)
			continue
		}
		n++
	}
	return n, nil
}

// next is what a build Job's change wakes: the oldest waiters of the kind label, as many as
// could start. Each reconciler wakes its own kind; the oldest of all is among them.
func (q *buildQueue) next(label string) []reconcile.Request {
	if q == nil {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	type entry struct {
		key   waiterKey
		since time.Time
	}
	var ws []entry
	for k, w := range q.waiting {
		if k.label == label {
			ws = append(ws, entry{k, w.since})
		}
	}
	slices.SortFunc(ws, func(a, b entry) int { return a.since.Compare(b.since) })
	var reqs []reconcile.Request
	for _, w := range ws[:min(len(ws), q.max)] {
		reqs = append(reqs, reconcile.Request{NamespacedName: w.key.NamespacedName})
	}
	return reqs
}
