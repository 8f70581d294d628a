package history

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"sless.dev/sless/gateway/api"
)

// Asynchronous invocations: an invocation accepted with 202 is a record here from the moment
// it is queued until its outcome, read back at /v1/namespaces/{ns}/invocations/{id}. The
// gateway creates it, whoever runs it (the dispatcher, the dev plane) updates it.

// States of an asynchronous invocation.
const (
	AsyncQueued    = "queued"    // waiting for its (next) attempt
	AsyncRunning   = "running"   // an attempt is under way
	AsyncSucceeded = "succeeded" // the function answered 2xx
	AsyncFailed    = "failed"    // every attempt failed: dead-lettered with the last error
)

// MaxAsyncResult caps the answer body kept of an asynchronous invocation.
const MaxAsyncResult = 256 << 10

// AsyncInvocation is one asynchronous invocation.
type AsyncInvocation struct {
	ID, Namespace, Function string
	// IdempotencyKey, when the caller sent one, makes a repeated request return this record;
	// RequestHash is the fingerprint of the request it was first used with.
	IdempotencyKey string
	RequestHash    string
	Status         string
	Attempts       int
	MaxAttempts    int
	Created        time.Time
	Updated        time.Time
	HTTPStatus     int
	// Result is the first MaxAsyncResult bytes of the answer; Truncated says there was more.
	Result      []byte
	Truncated   bool
	ContentType string
	Error       string
	// CallbackURL, when set, gets the outcome POSTed once it is final.
	CallbackURL string
	ColdStart   bool
}

// Final reports whether the invocation has its outcome.
func (a *AsyncInvocation) Final() bool { return a.Status == AsyncSucceeded || a.Status == AsyncFailed }

// Unstarted reports an invocation queued whose first attempt has not begun.
func (a *AsyncInvocation) Unstarted() bool { return a.Status == AsyncQueued && a.Attempts == 0 }

// NewAsyncInvocation is the record of req as it is queued.
func NewAsyncInvocation(req AsyncRequest) AsyncInvocation {
	return AsyncInvocation{Namespace: req.Namespace, Function: req.Function, IdempotencyKey: req.IdempotencyKey,
		RequestHash: req.RequestHash, Status: AsyncQueued, MaxAttempts: req.MaxAttempts, CallbackURL: req.CallbackURL}
}

// AsyncStore keeps asynchronous invocations.
type AsyncStore interface {
	// CreateAsync stores inv (its ID assigned when empty). When an invocation of the same
	// namespace, function and idempotency key exists, it returns that one and created false.
	CreateAsync(ctx context.Context, inv AsyncInvocation) (stored AsyncInvocation, created bool, err error)
	// GetAsync returns one invocation of ns; ErrAsyncNotFound when there is none.
	GetAsync(ctx context.Context, ns, id string) (AsyncInvocation, error)
	// UpdateAsync applies change to the stored invocation and stores the result.
	UpdateAsync(ctx context.Context, ns, id string, change func(*AsyncInvocation)) (AsyncInvocation, error)
	// DeleteAsync removes an invocation that could not be queued, so a retry of the same
	// idempotency key queues it anew.
	DeleteAsync(ctx context.Context, ns, id string) error
	// ListAsync returns ns's invocations of function ("" any) in status ("" any), newest first,
	// at most limit.
	ListAsync(ctx context.Context, ns, function, status string, limit int) ([]AsyncInvocation, error)
}

// ErrAsyncNotFound is the answer for an invocation that does not exist.
var ErrAsyncNotFound = errors.New("no such asynchronous invocation")

// NewAsyncID is a random invocation ID (24 lowercase hex digits).
func NewAsyncID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // never fails: crypto/rand crashes the program rather
	return hex.EncodeToString(b)
}

// ValidAsyncID reports whether id has the form NewAsyncID gives.
func ValidAsyncID(id string) bool {
	if len(id) != 24 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil && id == strings.ToLower(id)
}

// AsyncRequest is the request an asynchronous invocation replays to the function: what the
// gateway would have forwarded (credentials stripped, identity headers set), the retry policy
// of the function, and the caller's idempotency key and callback.
type AsyncRequest struct {
	Namespace, Function string
	Method, Path        string // Path: the escaped path below the function, "/" at least
	RawQuery            string
	Header              map[string][]string
	Body                []byte
	IdempotencyKey      string
	// RequestHash fingerprints what the key is bound to (see gateway's requestHash).
	RequestHash string
	CallbackURL string
	MaxAttempts int
}

// API is the wire form of a.
func (a AsyncInvocation) API() api.AsyncInvocation {
	out := api.AsyncInvocation{ID: a.ID, Function: a.Function, Status: a.Status, Attempts: a.Attempts, MaxAttempts: a.MaxAttempts,
		CreatedAt: a.Created, UpdatedAt: a.Updated, HTTPStatus: a.HTTPStatus, ResultTruncated: a.Truncated,
		ContentType: a.ContentType, Error: a.Error, IdempotencyKey: a.IdempotencyKey, ColdStart: a.ColdStart}
	if utf8.Valid(a.Result) {
		out.Result = string(a.Result)
	} else {
		out.Result, out.ResultBase64 = base64.StdEncoding.EncodeToString(a.Result), true
	}
	return out
}
