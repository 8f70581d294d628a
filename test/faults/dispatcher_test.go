//go:build faults

package faults

import (
	"encoding/hex"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/rules"
	"sless.dev/sless/scaling"
)

// dispatcherNamespace is the namespace of the function the standalone dispatchers invoke.
const dispatcherNamespace = "faults"

// faultsMaster is the platform's master key in this suite: the gateway reads it from its
// Secret (readyFunction), the dispatchers get the ledger function's key derived from it, and
// the function checks their calls with that key (startFunction).
var faultsMaster = []byte("faults-suite-master-of-32-bytes!")

// dispatcherSpec is `sless dispatcher` exactly as an event trigger's ScaledJob pod runs it
// (arguments and environment rendered by scaling.MakeScaledJob), with the function's own
// URL standing where the KEDA interceptor would be and the Secrets' values filled in.
func dispatcherSpec(t *testing.T, name, queue, target, dbURL string) procSpec {
	t.Helper()
	fn := &v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Namespace: dispatcherNamespace, Name: "ledger"}}
	fn.Spec.TimeoutSeconds = 30
	tr := &v1alpha1.Trigger{ObjectMeta: metav1.ObjectMeta{Namespace: dispatcherNamespace, Name: "events"}, Spec: v1alpha1.TriggerSpec{
		Type: v1alpha1.TriggerEvent, FunctionRef: v1alpha1.LocalObjectReference{Name: "ledger"},
		// The API server's defaults for an event trigger.
		Event: &v1alpha1.EventSpec{Queue: queue, BrokerSecretRef: v1alpha1.SecretKeyReference{Name: "broker"},
			QueueLength: 5, MaxJobs: 10, Retry: v1alpha1.RetryPolicy{MaxAttempts: 3, BackoffMillis: 1000}},
	}}
	opts := scaling.DefaultOptions()
	opts.InterceptorURL, opts.HistorySecret = target, "history"
	opts.IdentityMaster = faultsMaster
	c := scaling.MakeScaledJob(tr, fn, opts).Spec.JobTargetRef.Template.Spec.Containers[0]
	secrets := map[string]string{"broker": s.broker.url, "history": dbURL,
		scaling.IdentitySecretName(fn.Name): hex.EncodeToString(rules.FunctionKey(opts.IdentityMaster, fn.Namespace, fn.Name))}
	spec := procSpec{name: name, argv: append([]string{s.sless}, c.Args...)}
	for _, e := range c.Env {
		spec.env = append(spec.env, e.Name+"="+secretValue(t, e, secrets))
	}
	return spec
}

func secretValue(t *testing.T, e corev1.EnvVar, secrets map[string]string) string {
	t.Helper()
	if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
		return e.Value
	}
	v, ok := secrets[e.ValueFrom.SecretKeyRef.Name]
	if !ok {
		t.Fatalf("the dispatcher pod reads Secret %q, which the suite does not provide", e.ValueFrom.SecretKeyRef.Name)
	}
	return v
}

// TestKillDispatcher: 5,000 messages queued, the dispatcher killed with SIGKILL a fifth of
// the way through and started again, as the ScaledJob's next job would be. Every message must
// reach the function; the ones in flight at the kill come again (at-least-once).
func TestKillDispatcher(t *testing.T) {
	const scenario = "kill -9 `sless dispatcher`"
	db := s.pg.newDatabase(t, "kill_dispatcher")
	lg := newLedger(t)
	queue := "faults-kill-dispatcher"
	s.broker.declareQueue(t, queue)
	s.broker.publish(t, queue, "d", messages, 0).wait(t)
	spec := dispatcherSpec(t, "dispatcher-kill", queue, startFunction(t, "function-kill-dispatcher", lg), db)

	first := startProcT(t, spec)
	if err := until(time.Minute, first, func() bool { return readLedger(t, lg).count("d", messages, time.Time{}).distinct >= messages/5 }); err != nil {
		t.Fatalf("the dispatcher did not get through a fifth of the queue: %v", err)
	}
	killed := time.Now()
	first.kill(t)
	before := readLedger(t, lg).count("d", messages, time.Time{})
	if before.distinct == messages {
		t.Fatal("the queue was drained before the kill; nothing was in flight")
	}

	// The ScaledJob's job runs with --exit-when-empty: the restarted dispatcher drains the
	// queue and exits 0 by itself.
	f := fault{at: killed, over: time.Now()} // in-flight requests of the killed one may still finish before
	second := startProcT(t, spec)
	if err := second.wait(2 * time.Minute); err != nil {
		t.Fatalf("the restarted dispatcher did not drain the queue and exit 0: %v", err)
	}
	c := waitLedger(t, lg, "d", messages, f.over, 10*time.Second)
	if n := s.broker.queueDepth(t, queue+".dlq"); n != 0 {
		t.Errorf("%d messages were dead-lettered; the function never failed", n)
	}
	hist := settledHistory(t, db, dispatcherNamespace, "ledger", map[string]int{"event": c.runs}, 2*time.Second)
	s.results.add(t, amqpRow(scenario, loadDispatcher, messages, c, hist["event"], f))
	t.Logf("in flight at the kill: %d of %d messages not yet run", messages-before.distinct, messages)
	assertHistoryLoss(t, "event", c.runs, hist["event"], killBound(readLedger(t, lg), "d", killed))
}
