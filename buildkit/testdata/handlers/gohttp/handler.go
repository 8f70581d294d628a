// Package handler is a test function in the net/http form: it answers the request itself
// (server-sent events with trailers-free flushing, and a WebSocket echo).
package handler

import (
	"fmt"
	"net/http"
	"time"

	"github.com/coder/websocket"
)

func Handle(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/ws":
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, append([]byte("echo: "), msg...)); err != nil {
				return
			}
		}
	case "/events":
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := 0; i < 3; i++ {
			if i > 0 {
				time.Sleep(300 * time.Millisecond)
			}
			fmt.Fprintf(w, "data: tick %d\n\n", i)
			_ = rc.Flush()
		}
	case "/tick": // one event, flushed: a stream's first byte (devplane's BenchmarkStreamFirstByte)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: tick\n\n")
		_ = http.NewResponseController(w).Flush()
	case "/panic":
		panic("kaboom")
	case "/deadline":
		deadline, ok := r.Context().Deadline()
		fmt.Fprintf(w, "%v %v", ok, time.Until(deadline).Round(time.Second))
	default:
		w.Header().Set("X-Form", "net/http")
		w.WriteHeader(http.StatusTeapot)
		fmt.Fprintf(w, "%s %s", r.Method, r.URL.Path)
	}
}
