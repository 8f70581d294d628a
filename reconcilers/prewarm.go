package reconcilers

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/dispatcher"
	"sless.dev/sless/rules"
	"sless.dev/sless/triggers/kind"
)

// warmers keep functions up for the ticks of cron triggers that ask for a pre-warm: the
// operator requests the function's health path through the KEDA interceptor, as a caller
// would, from prewarmSeconds before a tick until just after it (dispatcher.Warm).
type warmers struct {
	ctx    context.Context // the manager's: warming stops with the operator
	client *http.Client
	url    string
	log    *slog.Logger

	mu    sync.Mutex
	until map[warmKey]time.Time // the end of each trigger's warming of a host under way
}

// warmKey is one trigger's warming of one revision host.
type warmKey struct {
	uid  types.UID
	host string
}

func newWarmers(ctx context.Context, interceptorURL string, log *slog.Logger) *warmers {
	return &warmers{ctx: ctx, client: &http.Client{Timeout: 2 * time.Minute}, url: interceptorURL, log: log, until: map[warmKey]time.Time{}}
}

// keep warms host until until for trigger uid, unless a warming that lasts as long runs.
func (w *warmers) keep(uid types.UID, host string, until time.Time) {
	key := warmKey{uid, host}
	w.mu.Lock()
	if !w.until[key].Before(until) {
		w.mu.Unlock()
		return
	}
	w.until[key] = until
	w.mu.Unlock()
	go func() {
		dispatcher.Warm(w.ctx, w.client, w.url, host, dispatcher.WarmHold, until, w.log.With("host", host))
		w.mu.Lock()
		if w.until[key].Equal(until) {
			delete(w.until, key)
		}
		w.mu.Unlock()
	}()
}

// prewarm starts the warming of tr's function when its window for the next tick of its
// schedule c (nil: its kind has none) has begun, and says when to look again: at the next
// window's start, or just after the tick.
func (r *TriggerReconciler) prewarm(tr *v1.Trigger, fn *v1.Function, c *kind.Schedule, now time.Time) error {
	if c == nil || c.PrewarmSeconds <= 0 || !tr.Spec.IsEnabled() || r.warm == nil {
		return nil
	}
	next, err := dispatcher.NextTick(c.Cron, c.TimeZone, now)
	if err != nil {
		return nil // the CRD's pattern admits what cron cannot parse: the CronJob reports it
	}
	from, until := rules.PrewarmWindow(next, time.Duration(c.PrewarmSeconds)*time.Second)
	if now.Before(from) {
		return retryAfter(from.Sub(now))
	}
	// Every revision the tick may land on (the dispatcher picks by the same traffic).
	for _, t := range fn.Status.Traffic {
		if t.Revision != "" && t.Percent > 0 {
			r.warm.keep(tr.UID, rules.RevisionHost(fn.Namespace, t.Revision, r.Options.Domain), until)
		}
	}
	return retryAfter(next.Sub(now) + time.Second)
}
