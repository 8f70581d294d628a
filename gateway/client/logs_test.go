package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"sless.dev/sless/gateway/api"
)

// TestLogs: the query carries since, tail and follow; NDJSON lines arrive one by one; a
// follow ended by the context is not an error; an emit error ends the read.
func TestLogs(t *testing.T) {
	c := serve(t, "", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/namespaces/ns/functions/f/logs":
			if got := r.URL.Query().Encode(); got != "since=10m&tail=2" {
				t.Errorf("query %s", got)
			}
			_, _ = io.WriteString(w, `{"time":"2025-01-02T03:04:05Z","instance":"p1","stream":"stdout","line":"one"}`+"\n"+`{"time":"2025-01-02T03:04:06Z","line":"two"}`+"\n")
		case "/v1/namespaces/ns/functions/f/builds/latest/logs":
			_, _ = io.WriteString(w, `{"time":"2025-01-02T03:04:05Z","line":"building"}`+"\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done() // follow: open until the client leaves
		case "/v1/namespaces/ns/jobs/j/logs":
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":"job \"j\" not found"}`)
		}
	})
	ctx := context.Background()
	var got []api.LogLine
	collect := func(l api.LogLine) error { got = append(got, l); return nil }
	if err := c.FunctionLogs(ctx, "ns", "f", LogOptions{Since: "10m", Tail: 2}, collect); err != nil || len(got) != 2 ||
		got[0].Instance != "p1" || got[0].Stream != "stdout" || got[1].Line != "two" || !got[1].Time.Equal(time.Date(2025, 1, 2, 3, 4, 6, 0, time.UTC)) {
		t.Fatalf("function logs: %+v, %v", got, err)
	}
	fctx, cancel := context.WithCancel(ctx)
	err := c.BuildLogs(fctx, "ns", "f", LogOptions{Follow: true}, func(l api.LogLine) error { cancel(); return nil })
	if err != nil {
		t.Fatalf("a follow ended by its context: %v", err)
	}
	stop := errors.New("enough")
	if err := c.FunctionLogs(ctx, "ns", "f", LogOptions{Since: "10m", Tail: 2}, func(api.LogLine) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("emit error: %v", err)
	}
	if err := c.JobLogs(ctx, "ns", "j", LogOptions{}, collect); !IsNotFound(err) {
		t.Fatalf("404: %v", err)
	}
}
