package rules

// Limits and defaults of the API, stated once: the gateway's validation (both control
// planes), the Terraform provider's plan and `sless dev` read them here, and the CRD markers,
// which can only hold literals, repeat them — limits_test.go holds every marker of every CRD
// equal to one of these (or to a limit sless does not own).
const (
	MaxNameLength = 63 // an object's name: a DNS label

	MinMemoryMB, MaxMemoryMB, DefaultMemoryMB = 32, 16384, 128

	MaxReplicas, DefaultMaxReplicas = 1000, 10 // minReplicas 0–MaxReplicas, maxReplicas 1–MaxReplicas

	MinScaleDownSeconds, MaxScaleDownSeconds, DefaultScaleDownSeconds = 1, 86400, 300

	// A streamed response (or any answer of unknown length) that sends nothing for this long
	// is ended by the gateway; the function's timeout bounds its whole length.
	MinStreamIdleSeconds, MaxStreamIdleSeconds, DefaultStreamIdleSeconds = 1, 3600, 60

	MetricConcurrency, MetricRequestRate   = "concurrency", "requestRate"
	DefaultScalingMetric                   = MetricConcurrency
	MaxScalingTarget, DefaultScalingTarget = 100000, 100

	// MaxEnvVars bounds a function's environment; MaxEnvValueBytes and MaxEnvTotalBytes its
	// size (names and values): an environment this large already fails exec on some
	// systems and slows every write of the object.
	MaxEnvVars, MaxEnvValueBytes, MaxEnvTotalBytes = 256, 32 << 10, 128 << 10

	MaxImageLength      = 512 // a prebuilt image reference
	MaxQueueLength      = 255 // AMQP's limit on a queue name
	MaxSecretNameLength = 253 // a Secret's name

	// Retries of an asynchronous call or an event trigger's message.
	MaxAttempts, DefaultMaxAttempts        = 100, 3
	MaxBackoffMillis, DefaultBackoffMillis = 3600000, 1000

	MaxAsyncJobs, DefaultAsyncJobs = 100, 10  // dispatcher Jobs draining a function's async queue
	MaxEventJobs, DefaultEventJobs = 1000, 10 // dispatcher Jobs draining an event trigger's queue
	DefaultEventQueueLength        = 5        // messages per dispatcher Job that KEDA scales on

	DefaultBrokerSecretKey         = "host"
	DefaultConcurrencyPolicy       = "Forbid" // a cron tick never overlaps the previous one
	DefaultStartingDeadlineSeconds = 60
)
