package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
)

// maxLogTail caps ?tail= (and a query without it): a log read is bounded.
const maxLogTail = 10000

// logsHandler serves GET .../logs of source as NDJSON, flushed line by line so ?follow=true
// streams.
func (s *Server) logsHandler(source backend.LogSource) echo.HandlerFunc {
	return func(c echo.Context) error {
		name, err := nameParam(c)
		if err != nil {
			return err
		}
		q, err := logQuery(source, c.Param("ns"), name, c.QueryParam("since"), c.QueryParam("tail"), c.QueryParam("follow"), time.Now())
		if err != nil {
			return err
		}
		w := c.Response()
		enc := json.NewEncoder(w)
		started := false
		err = s.cfg.Backend.Logs(c.Request().Context(), q, func(l api.LogLine) error {
			if !started {
				w.Header().Set("Content-Type", "application/x-ndjson")
				w.WriteHeader(http.StatusOK)
				started = true
			}
			if err := enc.Encode(l); err != nil {
				return err
			}
			w.Flush()
			return nil
		})
		if err != nil && !started {
			return err // nothing written yet: a proper error answer
		}
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
		}
		return nil
	}
}

// logQuery reads ?since= (a duration back from now, e.g. 10m, or an RFC 3339 time), ?tail=
// (the last N lines) and ?follow= (true: keep streaming).
func logQuery(source backend.LogSource, ns, name, since, tail, follow string, now time.Time) (backend.LogQuery, error) {
	q := backend.LogQuery{Source: source, Namespace: ns, Name: name, Tail: maxLogTail}
	if since != "" {
		if d, err := time.ParseDuration(since); err == nil && d >= 0 {
			q.Since = now.Add(-d)
		} else if t, err := time.Parse(time.RFC3339, since); err == nil {
			q.Since = t
		} else {
			return q, invalid("since", "%q is neither a duration such as 10m nor an RFC 3339 time", since)
		}
	}
	if tail != "" {
		n, err := strconv.Atoi(tail)
		if err != nil || n < 1 || n > maxLogTail {
			return q, invalid("tail", "%q is not a number of lines from 1 to %d", tail, maxLogTail)
		}
		q.Tail = n
	}
	if follow != "" {
		f, err := strconv.ParseBool(follow)
		if err != nil {
			return q, invalid("follow", "%q is not true or false", follow)
		}
		q.Follow = f
	}
	return q, nil
}
