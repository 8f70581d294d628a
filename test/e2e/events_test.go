//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"sless.dev/sless/gateway/api"
)

// recordingPython logs every event it gets (one write of one line on stdout, which its pod's
// log keeps beside the wrapper's lines on stderr) and fails on events asking for it.
const recordingPython = `import json, sys

def handle(event, request=None):
    if event.get("fail"):
        raise RuntimeError("asked to fail")
    sys.stdout.write("E2E-EVENT " + json.dumps(event) + "\n")
    sys.stdout.flush()
    return {"ok": True}
`

const amqpURL = "amqp://guest:guest@127.0.0.1:5672/"

// tenantSecrets gives the tenant's namespace the broker URL, as its owner does through the
// secrets API, and the history database, as an operator of the platform would.
func tenantSecrets(t *testing.T, tn tenant) {
	t.Helper()
	ctx := context.Background()
	if _, err := tn.c.CreateSecret(ctx, tn.ns, api.CreateSecret{Name: "broker", SecretFields: api.SecretFields{
		Data: map[string]string{"host": strings.Replace(amqpURL, "127.0.0.1", nodeIP, 1)}}}); err != nil {
		t.Fatal(err)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sless-history", Namespace: tn.ns}, StringData: map[string]string{"url": g.podDatabaseURL()}}
	if err := g.client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
}

func amqpChannel(t *testing.T) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		t.Fatalf("RabbitMQ through the namespace bridge: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func queueDepth(t *testing.T, ch *amqp.Channel, q string) int {
	t.Helper()
	st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("queue %s: %v", q, err)
	}
	return st.Messages
}

// readEvents counts the ids the function's pods logged.
func readEvents(t *testing.T, ns, function string) map[int]int {
	t.Helper()
	seen := map[int]int{}
	logs, err := filepath.Glob(filepath.Join(g.dir, "pods", "*", ns+"_"+function+"-*.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range logs {
		for _, line := range strings.Split(string(logText(path)), "\n") {
			var ev struct{ ID int }
			if _, rest, ok := strings.Cut(line, "E2E-EVENT "); ok && json.NewDecoder(strings.NewReader(rest)).Decode(&ev) == nil {
				seen[ev.ID]++
			}
		}
	}
	return seen
}

// TestEventTrigger is journey 3: messages on a RabbitMQ queue → KEDA's rabbitmq scaler
// starts dispatcher Jobs (ScaledJob) → each message is invoked through the interceptor,
// which wakes the function at zero, exactly once and acked → the queue drains; a failing
// function's messages go to the dead-letter queue after the retries.
func TestEventTrigger(t *testing.T) {
	t.Parallel()
	const total = 200
	tn := newTenant(t)
	tenantSecrets(t, tn)
	ctx := context.Background()
	deployShared(t, tn, "consumer", helloFields(5), map[string]string{"handler.py": recordingPython})

	ch := amqpChannel(t)
	queue := tn.ns + ".e2e-events"
	dlq := queue + "-dead"
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(queue, false, false, false)
		_, _ = ch.QueueDelete(dlq, false, false, false)
	})
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.c.CreateTrigger(ctx, tn.ns, api.CreateTrigger{Name: "orders", TriggerFields: api.TriggerFields{
		Type: ptr.To("event"), Function: ptr.To("consumer"), Queue: ptr.To(queue), BrokerSecret: ptr.To("broker"),
		MaxAttempts: ptr.To(int32(2)), BackoffMs: ptr.To(int32(100)), DeadLetterQueue: ptr.To(dlq)}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := 0; i < total; i++ {
		body := fmt.Sprintf(`{"id": %d}`, i)
		if i%50 == 7 { // four poison messages
			body = fmt.Sprintf(`{"id": %d, "fail": true}`, i)
		}
		if err := ch.PublishWithContext(ctx, "", queue, false, false, amqp.Publishing{ContentType: "application/json", Body: []byte(body), DeliveryMode: amqp.Persistent}); err != nil {
			t.Fatal(err)
		}
	}
	const poison = 4
	waitFor(t, 4*time.Minute, "every message handled", func() bool {
		return len(readEvents(t, tn.ns, "consumer")) == total-poison && queueDepth(t, ch, queue) == 0 && queueDepth(t, ch, dlq) == poison
	})
	t.Logf("%d messages: KEDA-started dispatcher jobs drained the queue in %s", total, time.Since(start).Round(time.Millisecond))
	for id, n := range readEvents(t, tn.ns, "consumer") {
		if n != 1 || id%50 == 7 {
			t.Errorf("message %d handled %d times", id, n)
		}
	}
	// Dispatchers write history off the hot path, in batches: the rows arrive shortly after.
	events := 0
	waitFor(t, 30*time.Second, "an event history row per handled message", func() bool {
		events = 0
		for before := ""; ; {
			page, err := tn.c.ListInvocations(ctx, tn.ns, "consumer", 100, before)
			if err != nil {
				t.Fatal(err)
			}
			for _, i := range page.Invocations {
				if i.Kind == "event" && i.Status == "succeeded" {
					events++
				}
			}
			if before = page.Next; before == "" {
				return events >= total-poison
			}
		}
	})
}
