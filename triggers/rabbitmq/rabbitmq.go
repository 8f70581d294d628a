// Package rabbitmq is the event trigger kind (type "event" on the wire and in the CRD): it
// fires its function for each message of a RabbitMQ queue, retrying and dead-lettering as
// its retry fields say, with the broker's amqp:// URL in a secret of the secrets API.
package rabbitmq

import (
	"strconv"
	"time"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
	"sless.dev/sless/triggers/kind"
)

// Kind is the event trigger kind.
type Kind struct{}

var _ kind.Kind = Kind{}

func (Kind) Name() string { return api.TriggerEvent }

func (Kind) Takes() string {
	return "an event trigger takes queue, broker_secret and retry fields only"
}

func (Kind) Fields() []kind.Field {
	return []kind.Field{
		{Name: "queue", Required: true, Exclusive: true, Queue: true,
			Get: func(s api.TriggerSpec) any { return s.Queue },
			Set: func(s *api.TriggerSpec, f api.TriggerFields) { kind.SetIf(&s.Queue, f.Queue) }},
		{Name: "broker_secret", Required: true, Exclusive: true, Secret: true,
			Get: func(s api.TriggerSpec) any { return s.BrokerSecret },
			Set: func(s *api.TriggerSpec, f api.TriggerFields) { kind.SetIf(&s.BrokerSecret, f.BrokerSecret) }},
		{Name: "broker_secret_key",
			Get: func(s api.TriggerSpec) any { return s.BrokerSecretKey },
			Set: func(s *api.TriggerSpec, f api.TriggerFields) { kind.SetIf(&s.BrokerSecretKey, f.BrokerSecretKey) }},
		{Name: "max_attempts",
			Get: func(s api.TriggerSpec) any { return s.MaxAttempts },
			Set: func(s *api.TriggerSpec, f api.TriggerFields) { kind.SetIf(&s.MaxAttempts, f.MaxAttempts) }},
		{Name: "backoff_ms",
			Get: func(s api.TriggerSpec) any { return s.BackoffMs },
			Set: func(s *api.TriggerSpec, f api.TriggerFields) { kind.SetIf(&s.BackoffMs, f.BackoffMs) }},
		{Name: "dead_letter_queue", Exclusive: true, Queue: true,
			Get: func(s api.TriggerSpec) any { return s.DeadLetterQueue },
			Set: func(s *api.TriggerSpec, f api.TriggerFields) { kind.SetIf(&s.DeadLetterQueue, f.DeadLetterQueue) }},
	}
}

func (Kind) Default(s *api.TriggerSpec) {
	s.BrokerSecretKey, s.MaxAttempts, s.BackoffMs = rules.DefaultBrokerSecretKey, rules.DefaultMaxAttempts, rules.DefaultBackoffMillis
}

func (Kind) Validate(s api.TriggerSpec) *rules.FieldError {
	if err := rules.CheckQueue("queue", s.Queue, true); err != nil {
		return err
	}
	if s.BrokerSecret == "" || len(s.BrokerSecret) > rules.MaxSecretNameLength {
		return &rules.FieldError{Field: "broker_secret", Reason: "an event trigger needs the name of a Secret holding the amqp:// URL"}
	}
	if err := rules.CheckQueue("dead_letter_queue", s.DeadLetterQueue, false); err != nil {
		return err
	}
	if err := rules.CheckRange("max_attempts", int64(s.MaxAttempts), 1, rules.MaxAttempts); err != nil {
		return err
	}
	return rules.CheckRange("backoff_ms", int64(s.BackoffMs), 0, rules.MaxBackoffMillis)
}

// SecretRefs is the broker secret, its key defaulted as KEDA's rabbitmq scaler expects.
func (k Kind) SecretRefs(s api.TriggerSpec) []kind.SecretRef {
	if s.Type != k.Name() {
		return nil
	}
	return []kind.SecretRef{{Secret: s.BrokerSecret, Key: BrokerSecretKey(s.BrokerSecretKey),
		Field: "broker_secret", KeyField: "broker_secret_key"}}
}

// Source is the queue: "queue sless-0123456789abcdef.orders".
func (Kind) Source(t api.Trigger) string { return "queue " + t.Queue }

// BrokerSecretKey is the key of the broker secret that holds the URL: key, or the default.
func BrokerSecretKey(key string) string {
	if key != "" {
		return key
	}
	return rules.DefaultBrokerSecretKey
}

func (Kind) FromCRD(s v1alpha1.TriggerSpec, out *api.TriggerSpec) {
	if e := s.Event; e != nil {
		out.Queue, out.BrokerSecret, out.BrokerSecretKey = e.Queue, e.BrokerSecretRef.Name, e.BrokerSecretRef.Key
		out.MaxAttempts, out.BackoffMs, out.DeadLetterQueue = e.Retry.MaxAttempts, e.Retry.BackoffMillis, e.DeadLetterQueue
	}
}

func (k Kind) ToCRD(s api.TriggerSpec, dst *v1alpha1.TriggerSpec) {
	if s.Type != k.Name() {
		dst.Event = nil
		return
	}
	if dst.Event == nil {
		dst.Event = &v1alpha1.EventSpec{}
	}
	e := dst.Event
	e.Queue, e.BrokerSecretRef = s.Queue, v1alpha1.SecretKeyReference{Name: s.BrokerSecret, Key: s.BrokerSecretKey}
	e.Retry.MaxAttempts, e.Retry.BackoffMillis, e.DeadLetterQueue = s.MaxAttempts, s.BackoffMs, s.DeadLetterQueue
}

func (Kind) CRDFields() map[string]string {
	return map[string]string{
		"spec.event":                     "queue",
		"spec.event.brokerSecretRef":     "broker_secret",
		"spec.event.brokerSecretRef.key": "broker_secret_key",
		"spec.event.retry.maxAttempts":   "max_attempts",
		"spec.event.retry.backoffMillis": "backoff_ms",
		"spec.event.deadLetterQueue":     "dead_letter_queue",
	}
}

func (Kind) Routes() bool { return false }

// Cluster is a ScaledJob whose rabbitmq scaler starts dispatcher Jobs while messages wait,
// each consuming the queue until it is drained; the broker URL comes from the trigger's
// broker secret, to KEDA through a TriggerAuthentication and to the dispatcher as
// SLESS_AMQP_URL.
func (Kind) Cluster(s v1alpha1.TriggerSpec) kind.Cluster {
	e := s.Event
	ref := e.BrokerSecretRef
	key := BrokerSecretKey(ref.Key)
	sc := Scaler(e.Queue, e.QueueLength, e.MaxJobs)
	sc.Auth = []kind.AuthSecret{{Parameter: "host", Secret: ref.Name, Key: key}}
	return kind.Cluster{
		Args:   DrainArgs(e.Queue, DeadLetterQueue(e.Queue, e.DeadLetterQueue), e.Retry),
		Env:    []kind.SecretEnv{{Name: "SLESS_AMQP_URL", Secret: ref.Name, Key: key}},
		Scaler: &sc,
	}
}

// Scaler is KEDA's rabbitmq scaler on queue: one Job per queueLength messages waiting, at
// most maxJobs at once. Its "host" parameter (the broker URL) comes from an AuthSecret.
func Scaler(queue string, queueLength, maxJobs int32) kind.Scaler {
	return kind.Scaler{
		Type: "rabbitmq",
		Metadata: map[string]string{
			"queueName": queue,
			"mode":      "QueueLength",
			"value":     strconv.Itoa(int(queueLength)),
			"protocol":  "amqp",
		},
		MaxJobs: maxJobs,
	}
}

// DrainArgs make `sless dispatcher` (with flags) consume queue until it is empty, retrying
// as retry says and moving exhausted messages to dlq.
func DrainArgs(queue, dlq string, retry v1alpha1.RetryPolicy, flags ...string) []string {
	return append(append([]string{"dispatcher"}, flags...),
		"--queue="+queue,
		"--dead-letter-queue="+dlq,
		"--max-attempts="+strconv.Itoa(int(retry.MaxAttempts)),
		"--backoff="+(time.Duration(retry.BackoffMillis)*time.Millisecond).String(),
		"--exit-when-empty",
	)
}

// DeadLetterQueue is where an event trigger's exhausted messages go: the one it names, else
// <queue>.dlq.
func DeadLetterQueue(queue, configured string) string {
	if configured != "" {
		return configured
	}
	return queue + ".dlq"
}
