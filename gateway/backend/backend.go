// Package backend is the contract between the API server (gateway) and the control planes
// that store and run functions: the cluster (gateway/cluster) and `sless dev` (devplane).
// It imports neither, so a control plane does not pull in the HTTP server.
package backend

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"time"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/history"
	"sless.dev/sless/rules"
)

// Backend stores functions, triggers and jobs and routes /fn/ traffic to running functions.
// The cluster backend (gateway/cluster) maps it onto the CRDs; `sless dev` implements it
// locally. Methods return the typed errors below (NotFoundError, ConflictError,
// InvalidError) for user mistakes; anything else is an internal error.
//
// Updates take a mutate function that is applied to the current spec and may be retried on a
// write conflict, so it must be pure.
type Backend interface {
	EnsureNamespace(ctx context.Context, ns string) error
	Functions() Store[api.Function, api.FunctionSpec]
	Triggers() Store[api.Trigger, api.TriggerSpec]
	Jobs() Store[api.Job, api.JobSpec]
	// Secrets keeps values write-only: its objects carry names, keys and versions, and an
	// Update's mutate is handed an empty spec (the new data replaces the old whole).
	Secrets() Store[api.Secret, api.SecretSpec]
	// Revisions lists a function's revisions, oldest first (NotFoundError for a function
	// that does not exist).
	Revisions(ctx context.Context, ns, function string) ([]api.Revision, error)
	Router
	Logs
}

// UnsupportedError says a control plane does not offer a feature (the gateway answers
// 501).
type UnsupportedError struct {
	Feature, Plane string
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("%s is not available on the %s control plane yet", e.Feature, e.Plane)
}

// Logs reads what functions, their builds and job runs printed.
type Logs interface {
	// Logs calls emit with each line q selects, oldest first; with q.Follow it then waits for
	// new lines until ctx ends. An error from emit ends it. It answers NotFoundError for an
	// object that does not exist.
	Logs(ctx context.Context, q LogQuery, emit func(api.LogLine) error) error
}

// LogSource is what a log belongs to.
type LogSource string

const (
	LogFunction LogSource = "function" // the instances of a function
	LogBuild    LogSource = "build"    // the latest build of a function
	LogJob      LogSource = "job"      // the latest run of a job
)

// LogQuery selects lines of one object's log.
type LogQuery struct {
	Source          LogSource
	Namespace, Name string
	// Since drops older lines (zero: none); Tail keeps only the last Tail of the rest (0: all).
	Since  time.Time
	Tail   int
	Follow bool
}

// Store is one kind's objects in a Backend: O is the object as the API answers it, S its
// spec.
type Store[O, S any] interface {
	List(ctx context.Context, ns string) ([]O, error)
	Get(ctx context.Context, ns, name string) (O, error)
	Create(ctx context.Context, ns, name string, spec S) (O, error)
	Update(ctx context.Context, ns, name string, mutate func(*S) error) (O, error)
	Delete(ctx context.Context, ns, name string) error
}

// Router resolves /fn/ targets. Route must answer from memory (an informer cache or a local
// table): it runs on every invocation.
type Router interface {
	Route(ns, name string) (Route, error)
	// Transport carries proxied requests; it reaches the function named by the request's
	// Host (the route's Host), e.g. by dialing the KEDA HTTP interceptor.
	Transport() http.RoundTripper
}

// Route is where and how /fn/{ns}/{name} is served.
type Route struct {
	// Host is the routing host the transport and the interceptor route on; "" while the
	// function is not deployed yet.
	Host string
	// Timeout is the function's own timeout; 0 means none.
	Timeout time.Duration
	// StreamIdle ends a response body of unknown length (a stream) that sends nothing for
	// this long.
	StreamIdle time.Duration
	// RequireAuth is set when an http trigger of the function asks for a valid token.
	RequireAuth bool
	// Disabled is set when the function has http triggers and all of them are disabled.
	Disabled bool
	// AsyncAttempts is how many attempts an asynchronous invocation gets; 0 when the
	// function takes none.
	AsyncAttempts int
	// MemoryMB is the memory of the function's instances, what its calls' GB-seconds are
	// counted by.
	MemoryMB int32
	// Targets is the function's traffic by revision (rules.ResolveTraffic) with the host
	// each runs under; when set, every call goes to one of them (rules.PickTarget) and Host
	// is not used.
	Targets []RouteTarget
}

// RouteTarget is one entry of a function's resolved traffic.
type RouteTarget struct {
	rules.ResolvedTarget
	// Host is where the revision runs; "" while it does not.
	Host string
}

// RouteOf is what /fn/ does with a function, the one rule both control planes route by:
// host, timeout and stream idle bound from the function (0: the default, for one stored
// before it had one), its memory (its defaulted spec's), the gate from its http triggers,
// and asynchronous calls taken only while something drains them (asyncReady: the cluster's
// Async condition, always in sless dev), each with at least one attempt.
func RouteOf(host string, timeoutSec, streamIdleSec, memoryMB int32, gate rules.Gate, asyncReady bool, maxAttempts int32) Route {
	r := Route{Host: host, Timeout: time.Duration(timeoutSec) * time.Second, RequireAuth: gate.RequireAuth, Disabled: gate.Disabled,
		MemoryMB:   memoryMB,
		StreamIdle: time.Duration(cmp.Or(streamIdleSec, rules.DefaultStreamIdleSeconds)) * time.Second}
	if asyncReady {
		r.AsyncAttempts = int(max(maxAttempts, 1))
	}
	return r
}

// NotFoundError says an object does not exist.
type NotFoundError struct {
	Kind, Namespace, Name string
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("%s %q not found in namespace %s", e.Kind, e.Name, e.Namespace)
}

// ConflictError says an object already exists or was changed concurrently.
type ConflictError struct {
	Kind, Namespace, Name, Reason string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%s %q in namespace %s: %s", e.Kind, e.Name, e.Namespace, e.Reason)
}

// QuotaError says a namespace already holds as many objects of a kind as the backend
// allows (the gateway answers 403, as Kubernetes does for an exceeded quota).
type QuotaError struct {
	Kind, Namespace string
	Limit           int
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("namespace %s already has %d %ss, the most allowed; delete one first", e.Namespace, e.Limit, e.Kind)
}

// InvalidError is a request field the backend (or its storage, e.g. a CRD validation rule)
// rejected. Field is the API field name.
type InvalidError struct {
	Field, Reason string
}

func (e *InvalidError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + ": " + e.Reason
}

// AsyncInvoker queues asynchronous invocations and reads them back. In a cluster it is the
// dispatcher's Publisher (RabbitMQ and PostgreSQL); `sless dev` has its own.
type AsyncInvoker interface {
	// Enqueue stores and queues req durably before it returns; created is false when the
	// idempotency key named an existing invocation, which it returns as it stands.
	Enqueue(ctx context.Context, req history.AsyncRequest) (inv history.AsyncInvocation, created bool, err error)
	GetAsync(ctx context.Context, ns, id string) (history.AsyncInvocation, error)
	ListAsync(ctx context.Context, ns, function, status string, limit int) ([]history.AsyncInvocation, error)
}
