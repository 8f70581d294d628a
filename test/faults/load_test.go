//go:build faults

package faults

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Load sizes of every scenario (the issue asks for at least 5,000 of each).
const (
	invocations = 5000
	messages    = 5000
	// rate paces each load so that a fault lands while most of it is still to come.
	rate = 1000
	// clients is how many HTTP callers run at once.
	clients = 32
)

// retryFor is how long a caller keeps retrying one invocation: longer than any restart.
const retryFor = time.Minute

// httpLoad POSTs {"id":"<prefix>-<i>"} to url for i < n from `clients` callers, paced at
// `rate` per second. A failed attempt (no answer or not 2xx) is retried every 50 ms until
// retryFor, as a caller of a restarting service would.
type httpLoad struct {
	url, prefix string
	n           int
	client      *http.Client

	ok, failedAttempts, retried, gaveUp atomic.Int64
	done                                chan struct{}
}

func startHTTPLoad(url, prefix string, n int) *httpLoad {
	l := &httpLoad{url: url, prefix: prefix, n: n, done: make(chan struct{}), client: &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: clients, DisableCompression: true},
	}}
	ids := make(chan int)
	go func() {
		start := time.Now()
		for i := range n {
			time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / rate)))
			ids <- i
		}
		close(ids)
	}()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for i := range ids {
				l.invoke(invocationID(prefix, i))
			}
		})
	}
	go func() {
		wg.Wait()
		l.client.CloseIdleConnections()
		close(l.done)
	}()
	return l
}

func (l *httpLoad) invoke(id string) {
	body := []byte(fmt.Sprintf(`{"id":%q}`, id))
	deadline := time.Now().Add(retryFor)
	for attempt := 0; ; attempt++ {
		if l.attempt(body) {
			l.ok.Add(1)
			if attempt > 0 {
				l.retried.Add(1)
			}
			return
		}
		l.failedAttempts.Add(1)
		if time.Now().After(deadline) {
			l.gaveUp.Add(1)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (l *httpLoad) attempt(body []byte) bool {
	resp, err := l.client.Post(l.url, "application/json", bytes.NewReader(body))
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 300
}

// finished is how many invocations were answered 2xx so far.
func (l *httpLoad) finished() int { return int(l.ok.Load()) }

// wait waits for the load to end by itself (every invocation answered or given up).
func (l *httpLoad) wait(t *testing.T) {
	t.Helper()
	select {
	case <-l.done:
	case <-time.After(retryFor + 2*time.Minute):
		t.Fatalf("HTTP load on %s did not end", l.url)
	}
	if n := l.gaveUp.Load(); n > 0 {
		t.Errorf("%d of %d invocations of %s never got a 2xx within %s of retries", n, l.n, l.url, retryFor)
	}
}
