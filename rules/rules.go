// Package rules holds what both control planes (reconcilers and devplane), the renderers
// and the gateway must decide the same way: names and URLs of functions, the limits every
// API enforces, whether a function's URL is open, and when the objects that depend on a
// function may proceed, and what a cron schedule is. It is pure (no I/O) and imports only
// the standard library and the cron parser, so the Terraform provider uses it too.
package rules

import (
	"fmt"
	"path"
	"strings"
	"time"
)

// DefaultDomain suffixes routing hosts unless an operator names another.
const DefaultDomain = "fn.sless.local"

// BuildSlotWait starts the status message of a function whose build the operator holds back
// (--max-concurrent-builds): the build has not started, so waits on a build's duration (the
// provider's build_timeout_sec, the e2e suite) do not count that time.
const BuildSlotWait = "waiting for a build slot"

// Limits every API enforces (the CRD schema repeats them as marker literals; a test holds
// both equal).
const (
	// MaxTimeoutSeconds is the longest timeout a function or job may set; 0 means none.
	MaxTimeoutSeconds = 900
	// InvocationMargin is added to a function's timeout by whatever waits for it (the
	// gateway, a dispatcher, a Job's deadline, a pod's termination grace, `sless dev`'s job
	// runs), so the function's own 504 arrives first.
	InvocationMargin = 5 * time.Second
)

// MaxTimeout is MaxTimeoutSeconds as a duration.
const MaxTimeout = MaxTimeoutSeconds * time.Second

// RoutingHost is the host the interceptor (or the local pool) routes a function's
// requests on.
func RoutingHost(namespace, name, domain string) string {
	return name + "." + namespace + "." + domain
}

// FunctionURL is where callers invoke a function through the gateway.
func FunctionURL(gatewayURL, namespace, name string) string {
	return strings.TrimSuffix(gatewayURL, "/") + "/fn/" + namespace + "/" + name
}

// InvocationDeadline is how long a caller waits for an invocation of a function with this
// timeout in seconds; 0 (no timeout) gives 0, no deadline.
func InvocationDeadline(timeoutSeconds int32) time.Duration {
	if timeoutSeconds <= 0 {
		return 0
	}
	return time.Duration(timeoutSeconds)*time.Second + InvocationMargin
}

// HTTPTrigger is what the gate needs of one http trigger of a function.
type HTTPTrigger struct {
	Enabled, RequireAuth bool
}

// Gate is what a function's http triggers say about its URL.
type Gate struct {
	// RequireAuth: an enabled http trigger asks for a valid token.
	RequireAuth bool
	// Disabled: the function has http triggers and every one is off (a function without
	// any stays reachable), so its URL answers 503 and it scales to zero.
	Disabled bool
}

// HTTPGate decides the gate from a function's http triggers (those being deleted left out).
func HTTPGate(triggers []HTTPTrigger) Gate {
	var g Gate
	enabled := 0
	for _, t := range triggers {
		if t.Enabled {
			enabled++
			g.RequireAuth = g.RequireAuth || t.RequireAuth
		}
	}
	g.Disabled = len(triggers) > 0 && enabled == 0
	return g
}

// FunctionReady is the readiness a dependent (a trigger, a job) waits for: the function is
// Ready as of its current generation, not an older one.
func FunctionReady(ready bool, generation, observedGeneration int64) bool {
	return ready && observedGeneration == generation
}

// Cold starts are signalled by the backend that held the request — the KEDA HTTP
// interceptor in a cluster, the process pool in `sless dev` — with KEDA's header, and shown
// to callers as sless's own.
const (
	HeaderBackendColdStart = "X-KEDA-HTTP-Cold-Start"
	HeaderColdStart        = "X-Sless-Cold-Start"
)

// CurrentMessage is the status message to show for an object: the reconciler's own once it
// has seen the current generation, else that the latest change is still being applied — a
// message about an older spec ("waiting for source" just after an upload) is not current.
func CurrentMessage(message string, generation, observedGeneration int64) string {
	if observedGeneration < generation {
		return "applying the latest change"
	}
	return message
}

// QueuePrefix starts every queue name of a tenant, the ones it sets (event triggers, dead
// letters) and the ones sless names for it: tenants may share a broker.
func QueuePrefix(namespace string) string { return namespace + "." }

// AsyncQueue is the queue of a function's asynchronous invocations.
func AsyncQueue(namespace, name string) string { return QueuePrefix(namespace) + "async." + name }

// AsyncDeadLetterQueue is where a function's asynchronous invocations go after their last
// attempt: the one its settings name, else AsyncQueue(...).dlq.
func AsyncDeadLetterQueue(namespace, name, configured string) string {
	if configured != "" {
		return configured
	}
	return AsyncQueue(namespace, name) + ".dlq"
}

// HealthPath is the wrappers' readiness path: it answers without calling the handler, so a
// pre-warm through it wakes a function without running it. It is reserved (ReservedPath).
const HealthPath = "/healthz"

// ReservedPath reports whether p, a function's own path (after /fn/<ns>/<name>, or the whole
// path on its host; percent-decoded), is one the wrappers answer themselves instead of the
// handler: the platform's probes and pre-warms reach it on the function's instances, never
// a caller through the gateway (a caller's /healthz was a success the function never
// earned). Dot segments and doubled slashes are cleaned first.
func ReservedPath(p string) bool {
	// Every /fn/ call asks: most paths are out at a substring search, without an allocation.
	return strings.Contains(p, HealthPath[1:]) && path.Clean("/"+p) == HealthPath
}

// Protocols a function's server may speak on its port. Every runtime's wrapper speaks
// HTTP/1.1; a prebuilt image may speak HTTP/2 without TLS (h2c) instead, as a gRPC server
// does, and is then reached over h2c from the interceptor on.
const (
	ProtocolHTTP1   = "http1"
	ProtocolH2C     = "h2c"
	DefaultProtocol = ProtocolHTTP1
)

// StoredProtocol is protocol as a function's code spec keeps it: the default as unset, as a
// function stored before it had a protocol is, so neither is a change to what runs (a
// revision).
func StoredProtocol(protocol string) string {
	if protocol == DefaultProtocol {
		return ""
	}
	return protocol
}

// ProtocolProblem says what is wrong with protocol for a function running image ("" when
// nothing is; an empty protocol is the default).
func ProtocolProblem(protocol, image string) string {
	switch protocol {
	case "", ProtocolHTTP1:
		return ""
	case ProtocolH2C:
		if image == "" {
			return "h2c needs a prebuilt image (image): the runtimes' wrappers speak HTTP/1.1"
		}
		return ""
	}
	return fmt.Sprintf("unknown protocol %q; use %s or %s (a prebuilt image speaking HTTP/2 without TLS, e.g. gRPC)", protocol, ProtocolHTTP1, ProtocolH2C)
}

// MaxPrewarmSeconds is the longest a cron trigger may wake its function before a tick.
const MaxPrewarmSeconds = 3600

// PrewarmMargin is how long after a tick the pre-warm keeps the function up: the tick's own
// invocation arrives within it.
const PrewarmMargin = 15 * time.Second

// PrewarmWindow is when a cron trigger keeps its function warm for the tick at next: from
// prewarm before it until PrewarmMargin after.
func PrewarmWindow(next time.Time, prewarm time.Duration) (from, until time.Time) {
	return next.Add(-prewarm), next.Add(PrewarmMargin)
}

// TriggerTypeImmutable is why a trigger's type cannot change, in every place that refuses it:
// the API on both planes and the CRD's CEL rule (its literal held equal by limits_test.go).
const TriggerTypeImmutable = "type is immutable; delete and re-create the trigger"
