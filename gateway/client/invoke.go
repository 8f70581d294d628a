package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Invocation is a call of a function through the gateway's /fn/ route.
type Invocation struct {
	Method string // default POST
	// Path is appended to /fn/<namespace>/<name> ("/orders/7"); it may carry a ?query.
	Path   string
	Header http.Header
	Body   io.Reader
}

// Invoke calls the function and returns its answer whatever the status (a function's 500 is
// an answer, not an error); the caller closes the body. The token, when the client has one,
// is sent for functions behind require_auth; the gateway never passes it on to the function.
func (c *Client) Invoke(ctx context.Context, ns, name string, in Invocation) (*http.Response, error) {
	method := in.Method
	if method == "" {
		method = http.MethodPost
	}
	p, query, _ := strings.Cut(in.Path, "?")
	if p != "" && !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("invoke %s: query %q: %w", name, query, err)
	}
	req, err := c.newRequest(ctx, method, "/fn/"+url.PathEscape(ns)+"/"+url.PathEscape(name)+p, q, in.Body)
	if err != nil {
		return nil, err
	}
	for k, vs := range in.Header {
		req.Header.Del(k) // the caller's own Authorization wins over the token
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("invoke %s: %w", name, err)
	}
	return resp, nil
}
