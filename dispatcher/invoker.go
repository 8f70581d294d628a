package dispatcher

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"sless.dev/sless/history"
	"sless.dev/sless/rules"
)

// Invoker calls the function once. It returns how the function answered and a non-nil
// error unless the invocation succeeded (2xx).
type Invoker interface {
	Invoke(ctx context.Context, c Call) (Result, error)
}

// Call is one request to a function. Events and cron ticks POST to the invoker's URL as it
// is (Method, Path and RawQuery empty); an asynchronous invocation replays its caller's
// (Path escaped, below the URL's).
type Call struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   []byte
	// KeepBody asks for the answer's body, at most history.MaxAsyncResult bytes.
	KeepBody bool
}

// Result is one invocation's answer: the function's HTTP status, whether the call waited
// for an instance to start (the interceptor's, or the dev pool's, cold-start header), and
// with Call.KeepBody the body.
type Result struct {
	Status    int
	ColdStart bool
	// Revision is the function's revision that answered: the target picked, else as the
	// backend names it (X-Sless-Revision; sless dev's router sets it), "" when it does not.
	Revision    string
	Body        []byte
	Truncated   bool
	ContentType string
}

// FunctionError is a non-2xx answer of the function.
type FunctionError struct {
	Status int
	Body   string // the first bytes of the response body
}

func (e *FunctionError) Error() string {
	if e.Body == "" {
		return fmt.Sprintf("function answered HTTP %d", e.Status)
	}
	return fmt.Sprintf("function answered HTTP %d: %s", e.Status, e.Body)
}

const errorBodyLen = 1024

// HTTPInvoker POSTs the event to URL. In a cluster URL is the KEDA HTTP interceptor and
// Targets the function's revisions by its traffic (each call picks one as the gateway
// does, rules.PickTarget), so the interceptor holds the request through a cold start of
// the revision picked; Host, without Targets, is the one host every call goes to (sless
// dev's pool routes a function's host by its traffic). Through the gateway URL is
// http://gateway/fn/<ns>/<name> and both are empty.
type HTTPInvoker struct {
	URL     string
	Host    string
	Targets []Target
	Client  *http.Client
	// Key is the function's key (rules.FunctionKey): each call is signed with it as it goes
	// out (rules.SignRequest), over the X-Sless-* headers the dispatcher set. Nil sends
	// calls unsigned, which a function holding a key refuses.
	Key []byte
}

// Target is a revision a dispatcher calls: Percent of the calls go to Host, the revision's
// routing host (rules.RevisionHost).
type Target struct {
	Revision, Host string
	Percent        int32
}

// ParseTarget reads a --target flag, <revision host>=<percent>.
func ParseTarget(s string) (Target, error) {
	host, p, ok := strings.Cut(s, "=")
	rev, _, _ := strings.Cut(host, ".")
	percent, err := strconv.ParseInt(p, 10, 32)
	if _, _, isRev := rules.RevisionOf(rev); !ok || err != nil || percent < 0 || percent > 100 || !isRev {
		return Target{}, &ConfigError{Field: "target", Reason: fmt.Sprintf("%q is not <revision host>=<percent> (e.g. hello-3.ns.rev.fn.sless.local=50)", s)}
	}
	return Target{Revision: rev, Host: host, Percent: int32(percent)}, nil
}

// NewHTTPInvoker validates target and returns an invoker whose connection pool keeps
// `concurrency` connections alive, one per concurrent invocation.
func NewHTTPInvoker(target, host string, concurrency int) (*HTTPInvoker, error) {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &ConfigError{Field: "target-url", Reason: fmt.Sprintf("%q is not an http(s) URL (e.g. http://keda-add-ons-http-interceptor-proxy.keda:8080/)", target)}
	}
	// One kept-alive connection per concurrent invocation; never more idle ones than that,
	// and an idle one is dropped before the interceptor's own idle timeout (90 s) closes it.
	t := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        max(concurrency, 2),
		MaxIdleConnsPerHost: max(concurrency, 2),
		IdleConnTimeout:     60 * time.Second,
		DisableCompression:  true, // only an error snippet is ever read
	}
	return &HTTPInvoker{URL: target, Host: host, Client: &http.Client{Transport: t}}, nil
}

// Invoke sends c; ctx bounds the whole exchange.
func (i *HTTPInvoker) Invoke(ctx context.Context, c Call) (Result, error) {
	target := i.URL
	if c.Path != "" || c.RawQuery != "" {
		u, err := url.Parse(i.URL)
		if err != nil {
			return Result{}, fmt.Errorf("invoke %s: %w", i.URL, err)
		}
		path, err := url.PathUnescape(c.Path)
		if err != nil {
			return Result{}, fmt.Errorf("invoke %s: path %q: %w", i.URL, c.Path, err)
		}
		u.Path, u.RawPath = strings.TrimSuffix(u.Path, "/")+path, strings.TrimSuffix(u.EscapedPath(), "/")+c.Path
		u.RawQuery = c.RawQuery
		target = u.String()
	}
	req, err := http.NewRequestWithContext(ctx, cmp.Or(c.Method, http.MethodPost), target, bytes.NewReader(c.Body))
	if err != nil {
		return Result{}, fmt.Errorf("build request to %s: %w", i.URL, err)
	}
	req.Header = c.Header
	revision := ""
	if n := rules.PickTarget(i.Targets, func(t *Target) int32 { return t.Percent }, ""); n >= 0 {
		req.Host, revision = i.Targets[n].Host, i.Targets[n].Revision
	} else if i.Host != "" {
		req.Host = i.Host
	}
	if i.Key != nil {
		rules.SignRequest(req, i.Key, time.Now())
	}
	resp, err := i.Client.Do(req)
	if err != nil {
		return Result{}, fmt.Errorf("invoke %s: %w", i.URL, err)
	}
	defer resp.Body.Close()
	res := Result{Status: resp.StatusCode, ColdStart: resp.Header.Get(rules.HeaderBackendColdStart) == "true", Revision: cmp.Or(revision, resp.Header.Get(rules.HeaderRevision))}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if c.KeepBody {
			res.Body, _ = io.ReadAll(io.LimitReader(resp.Body, history.MaxAsyncResult+1))
			res.Truncated = len(res.Body) > history.MaxAsyncResult
			res.Body, res.ContentType = res.Body[:min(len(res.Body), history.MaxAsyncResult)], resp.Header.Get("Content-Type")
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // lets the connection be reused
		return res, nil
	}
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, errorBodyLen))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return res, &FunctionError{Status: resp.StatusCode, Body: CleanValue(string(snippet))}
}
