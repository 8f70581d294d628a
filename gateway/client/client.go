// Package client is the Go client of the sless REST API, shared by the CLI and the Terraform
// provider. It depends on the standard library and gateway/api only.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"sless.dev/sless/gateway/api"
)

// Client calls one sless endpoint with one token.
type Client struct {
	endpoint *url.URL
	token    string
	http     *http.Client
}

// New returns a client for endpoint (e.g. https://sless.example.com). token is a JWT sent as a
// Bearer token ("" sends none); hc nil means http.DefaultClient.
func New(endpoint, token string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(endpoint, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("sless endpoint %q: want an http:// or https:// URL", endpoint)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{endpoint: u, token: token, http: hc}, nil
}

// Error is a non-2xx answer of the API.
type Error struct {
	StatusCode int
	Message    string
	Field      string
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("sless API: %d %s (field %s)", e.StatusCode, e.Message, e.Field)
	}
	return fmt.Sprintf("sless API: %d %s", e.StatusCode, e.Message)
}

// IsNotFound reports whether err is a 404 from the API.
func IsNotFound(err error) bool { return statusOf(err) == http.StatusNotFound }

// IsConflict reports whether err is a 409 from the API.
func IsConflict(err error) bool { return statusOf(err) == http.StatusConflict }

func statusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.StatusCode
	}
	return 0
}

func nsPath(ns string, parts ...string) string {
	p := "/v1/namespaces/" + url.PathEscape(ns)
	for _, s := range parts {
		p += "/" + url.PathEscape(s)
	}
	return p
}

// do sends a request with an optional JSON body (or raw reader) and decodes a JSON answer
// into out (nil: discarded).
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body any, out any) error {
	resp, err := c.send(ctx, method, path, query, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode answer of %s %s: %w", method, path, err)
	}
	return nil
}

// send sends a /v1 request and returns a 2xx answer, whose body the caller closes; any other
// status is an *Error.
func (c *Client) send(ctx context.Context, method, path string, query url.Values, body any) (*http.Response, error) {
	var (
		r           io.Reader
		contentType string
	)
	switch b := body.(type) {
	case nil:
	case io.Reader:
		r, contentType = b, "application/zip"
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return nil, fmt.Errorf("encode %s %s body: %w", method, path, err)
		}
		r, contentType = bytes.NewReader(data), "application/json"
	}
	req, err := c.newRequest(ctx, method, path, query, r)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

// newRequest builds a request for path under the endpoint, with the token when there is one.
func (c *Client) newRequest(ctx context.Context, method, path string, query url.Values, body io.Reader) (*http.Request, error) {
	u := *c.endpoint
	u.Path += path
	u.RawQuery = query.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("build %s %s: %w", method, path, err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

func decodeError(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var body api.Error
	if json.Unmarshal(data, &body) != nil || body.Error == "" {
		body.Error = strings.TrimSpace(string(data))
		if body.Error == "" {
			body.Error = http.StatusText(resp.StatusCode)
		}
	}
	return &Error{StatusCode: resp.StatusCode, Message: body.Error, Field: body.Field}
}

// WhoAmI returns the token's subject and tenant namespace.
func (c *Client) WhoAmI(ctx context.Context) (api.Identity, error) {
	return call[api.Identity](ctx, c, http.MethodGet, "/v1/whoami", nil, nil)
}

// EnsureNamespace creates the namespace if it does not exist.
func (c *Client) EnsureNamespace(ctx context.Context, ns string) error {
	return c.do(ctx, http.MethodPost, nsPath(ns, "ensure"), nil, nil, nil)
}

// call is do for a JSON answer of type O.
func call[O any](ctx context.Context, c *Client, method, path string, query url.Values, body any) (O, error) {
	var out O
	err := c.do(ctx, method, path, query, body, &out)
	return out, err
}

// CreateFunction creates a function.
func (c *Client) CreateFunction(ctx context.Context, ns string, fn api.CreateFunction) (api.Function, error) {
	return call[api.Function](ctx, c, http.MethodPost, nsPath(ns, "functions"), nil, fn)
}

// GetFunction returns one function.
func (c *Client) GetFunction(ctx context.Context, ns, name string) (api.Function, error) {
	return call[api.Function](ctx, c, http.MethodGet, nsPath(ns, "functions", name), nil, nil)
}

// ListFunctions returns the namespace's functions sorted by name.
func (c *Client) ListFunctions(ctx context.Context, ns string) ([]api.Function, error) {
	out, err := call[api.FunctionList](ctx, c, http.MethodGet, nsPath(ns, "functions"), nil, nil)
	return out.Functions, err
}

// UpdateFunction changes the fields set in f and leaves the others as they are.
func (c *Client) UpdateFunction(ctx context.Context, ns, name string, f api.FunctionFields) (api.Function, error) {
	return call[api.Function](ctx, c, http.MethodPut, nsPath(ns, "functions", name), nil, f)
}

// DeleteFunction deletes a function and everything it owns.
func (c *Client) DeleteFunction(ctx context.Context, ns, name string) error {
	return c.do(ctx, http.MethodDelete, nsPath(ns, "functions", name), nil, nil, nil)
}

// ListRevisions returns a function's revisions, oldest first, with their traffic.
func (c *Client) ListRevisions(ctx context.Context, ns, name string) ([]api.Revision, error) {
	out, err := call[api.RevisionList](ctx, c, http.MethodGet, nsPath(ns, "functions", name, "revisions"), nil, nil)
	return out.Revisions, err
}

// GetRevision returns one revision of a function.
func (c *Client) GetRevision(ctx context.Context, ns, name, rev string) (api.Revision, error) {
	return call[api.Revision](ctx, c, http.MethodGet, nsPath(ns, "functions", name, "revisions", rev), nil, nil)
}

// Rollback sends all of a function's traffic to revision to ("": the revision that served
// before the newest one serving now).
func (c *Client) Rollback(ctx context.Context, ns, name, to string) (api.Function, error) {
	return call[api.Function](ctx, c, http.MethodPost, nsPath(ns, "functions", name, "rollback"), nil, api.Rollback{To: to})
}

// UploadSource uploads a zip of the function's code; a build starts.
func (c *Client) UploadSource(ctx context.Context, ns, name string, zip io.Reader) (api.Function, error) {
	return call[api.Function](ctx, c, http.MethodPost, nsPath(ns, "functions", name, "upload"), nil, zip)
}

// UploadJobSource uploads a zip of a self-contained job's code; a build starts.
func (c *Client) UploadJobSource(ctx context.Context, ns, name string, zip io.Reader) (api.Job, error) {
	return call[api.Job](ctx, c, http.MethodPost, nsPath(ns, "jobs", name, "upload"), nil, zip)
}

// GetSource returns the files of the function's latest upload.
func (c *Client) GetSource(ctx context.Context, ns, name string) (api.SourceFiles, error) {
	return call[api.SourceFiles](ctx, c, http.MethodGet, nsPath(ns, "functions", name, "source"), nil, nil)
}

// ListInvocations returns one page of a function's invocations, newest first. before is the
// Next of the previous page ("" for the newest); limit 0 means the server's default.
func (c *Client) ListInvocations(ctx context.Context, ns, name string, limit int, before string) (api.Invocations, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if before != "" {
		q.Set("before", before)
	}
	return call[api.Invocations](ctx, c, http.MethodGet, nsPath(ns, "functions", name, "invocations"), q, nil)
}

// InvocationStats returns the function's invocations per bucket of window ("1h", "24h";
// "" is the server's default) with errors and duration percentiles.
func (c *Client) InvocationStats(ctx context.Context, ns, name, window string) (api.InvocationStats, error) {
	q := url.Values{}
	if window != "" {
		q.Set("window", window)
	}
	return call[api.InvocationStats](ctx, c, http.MethodGet, nsPath(ns, "functions", name, "stats"), q, nil)
}

// Usage returns the namespace's usage over from to to (RFC 3339; "" is the server's default:
// the last day) grouped by "hour", "day" or "function" ("" is by hour).
func (c *Client) Usage(ctx context.Context, ns, from, to, by string) (api.Usage, error) {
	q := url.Values{}
	for k, v := range map[string]string{"from": from, "to": to, "by": by} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return call[api.Usage](ctx, c, http.MethodGet, nsPath(ns, "usage"), q, nil)
}

// CreateTrigger creates a trigger.
func (c *Client) CreateTrigger(ctx context.Context, ns string, t api.CreateTrigger) (api.Trigger, error) {
	return call[api.Trigger](ctx, c, http.MethodPost, nsPath(ns, "triggers"), nil, t)
}

// GetTrigger returns one trigger.
func (c *Client) GetTrigger(ctx context.Context, ns, name string) (api.Trigger, error) {
	return call[api.Trigger](ctx, c, http.MethodGet, nsPath(ns, "triggers", name), nil, nil)
}

// ListTriggers returns the namespace's triggers sorted by name.
func (c *Client) ListTriggers(ctx context.Context, ns string) ([]api.Trigger, error) {
	out, err := call[api.TriggerList](ctx, c, http.MethodGet, nsPath(ns, "triggers"), nil, nil)
	return out.Triggers, err
}

// UpdateTrigger changes the fields set in f (e.g. only Enabled) in place.
func (c *Client) UpdateTrigger(ctx context.Context, ns, name string, f api.TriggerFields) (api.Trigger, error) {
	return call[api.Trigger](ctx, c, http.MethodPatch, nsPath(ns, "triggers", name), nil, f)
}

// SetTriggerEnabled enables or disables a trigger in place.
func (c *Client) SetTriggerEnabled(ctx context.Context, ns, name string, enabled bool) (api.Trigger, error) {
	return c.UpdateTrigger(ctx, ns, name, api.TriggerFields{Enabled: &enabled})
}

// DeleteTrigger deletes a trigger.
func (c *Client) DeleteTrigger(ctx context.Context, ns, name string) error {
	return c.do(ctx, http.MethodDelete, nsPath(ns, "triggers", name), nil, nil, nil)
}

// CreateJob creates a job.
func (c *Client) CreateJob(ctx context.Context, ns string, j api.CreateJob) (api.Job, error) {
	return call[api.Job](ctx, c, http.MethodPost, nsPath(ns, "jobs"), nil, j)
}

// GetJob returns one job.
func (c *Client) GetJob(ctx context.Context, ns, name string) (api.Job, error) {
	return call[api.Job](ctx, c, http.MethodGet, nsPath(ns, "jobs", name), nil, nil)
}

// ListJobs returns the namespace's jobs sorted by name.
func (c *Client) ListJobs(ctx context.Context, ns string) ([]api.Job, error) {
	out, err := call[api.JobList](ctx, c, http.MethodGet, nsPath(ns, "jobs"), nil, nil)
	return out.Jobs, err
}

// UpdateJob changes the fields set in f; raising RunID runs the job again.
func (c *Client) UpdateJob(ctx context.Context, ns, name string, f api.JobFields) (api.Job, error) {
	return call[api.Job](ctx, c, http.MethodPut, nsPath(ns, "jobs", name), nil, f)
}

// DeleteJob deletes a job.
func (c *Client) DeleteJob(ctx context.Context, ns, name string) error {
	return c.do(ctx, http.MethodDelete, nsPath(ns, "jobs", name), nil, nil, nil)
}

// CreateSecret creates a secret; the answer carries its keys and version, never a value.
func (c *Client) CreateSecret(ctx context.Context, ns string, sec api.CreateSecret) (api.Secret, error) {
	return call[api.Secret](ctx, c, http.MethodPost, nsPath(ns, "secrets"), nil, sec)
}

// GetSecret returns a secret's keys and version.
func (c *Client) GetSecret(ctx context.Context, ns, name string) (api.Secret, error) {
	return call[api.Secret](ctx, c, http.MethodGet, nsPath(ns, "secrets", name), nil, nil)
}

// ListSecrets returns the namespace's secrets sorted by name.
func (c *Client) ListSecrets(ctx context.Context, ns string) ([]api.Secret, error) {
	out, err := call[api.SecretList](ctx, c, http.MethodGet, nsPath(ns, "secrets"), nil, nil)
	return out.Secrets, err
}

// UpdateSecret replaces a secret's whole data (a rotation: a new version); the functions
// that reference it roll.
func (c *Client) UpdateSecret(ctx context.Context, ns, name string, f api.SecretFields) (api.Secret, error) {
	return call[api.Secret](ctx, c, http.MethodPut, nsPath(ns, "secrets", name), nil, f)
}

// DeleteSecret deletes a secret; the server refuses (409) while a function or trigger
// references it.
func (c *Client) DeleteSecret(ctx context.Context, ns, name string) error {
	return c.do(ctx, http.MethodDelete, nsPath(ns, "secrets", name), nil, nil, nil)
}

// GetAsyncInvocation returns an asynchronous invocation (the ID of a 202's Location).
func (c *Client) GetAsyncInvocation(ctx context.Context, ns, id string) (api.AsyncInvocation, error) {
	return call[api.AsyncInvocation](ctx, c, http.MethodGet, nsPath(ns, "invocations", id), nil, nil)
}

// ListAsyncInvocations returns a namespace's asynchronous invocations, newest first, of one
// function and in one status when given ("" any); limit 0 means the server's default.
func (c *Client) ListAsyncInvocations(ctx context.Context, ns, function, status string, limit int) ([]api.AsyncInvocation, error) {
	q := url.Values{}
	if function != "" {
		q.Set("function", function)
	}
	if status != "" {
		q.Set("status", status)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	out, err := call[api.AsyncInvocations](ctx, c, http.MethodGet, nsPath(ns, "invocations"), q, nil)
	return out.Invocations, err
}
