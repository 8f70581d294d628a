package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"sless.dev/sless/gateway/api"
)

// LogOptions select the lines of a log read; the zero value reads what the server keeps, up
// to its cap, and returns.
type LogOptions struct {
	// Since drops older lines: a duration back from now ("10m") or an RFC 3339 time, as the
	// API takes it ("" keeps all).
	Since string
	// Tail keeps only the last Tail lines (0: the server's cap).
	Tail int
	// Follow keeps the stream open for new lines until ctx ends.
	Follow bool
}

// FunctionLogs calls emit with each line the function's instances printed, oldest first.
func (c *Client) FunctionLogs(ctx context.Context, ns, name string, o LogOptions, emit func(api.LogLine) error) error {
	return c.logs(ctx, nsPath(ns, "functions", name, "logs"), o, emit)
}

// BuildLogs calls emit with each line of the function's latest build output (compiler,
// pip, npm; kaniko in a cluster).
func (c *Client) BuildLogs(ctx context.Context, ns, name string, o LogOptions, emit func(api.LogLine) error) error {
	return c.logs(ctx, nsPath(ns, "functions", name, "builds", "latest", "logs"), o, emit)
}

// JobLogs calls emit with each line the job's latest run printed.
func (c *Client) JobLogs(ctx context.Context, ns, name string, o LogOptions, emit func(api.LogLine) error) error {
	return c.logs(ctx, nsPath(ns, "jobs", name, "logs"), o, emit)
}

// logs reads the NDJSON stream of path line by line. A follow ended by ctx returns nil; an
// error from emit ends the read and is returned.
func (c *Client) logs(ctx context.Context, path string, o LogOptions, emit func(api.LogLine) error) error {
	q := url.Values{}
	if o.Since != "" {
		q.Set("since", o.Since)
	}
	if o.Tail > 0 {
		q.Set("tail", strconv.Itoa(o.Tail))
	}
	if o.Follow {
		q.Set("follow", "true")
	}
	resp, err := c.send(ctx, http.MethodGet, path, q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20) // a line is capped by the server, not by 64 KiB
	for sc.Scan() {
		var l api.LogLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return fmt.Errorf("decode log line of %s: %w", path, err)
		}
		if err := emit(l); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil && !(o.Follow && ctx.Err() != nil) {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	return nil
}
