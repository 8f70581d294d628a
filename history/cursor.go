package history

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// cursor is the position after the last record of a page: records strictly older than
// (start, id) come next. IDs break ties between records with the same start.
type cursor struct {
	start time.Time
	id    int64
}

func (c cursor) isZero() bool { return c.start.IsZero() && c.id == 0 }

// before reports whether a record sorts after the cursor in newest-first order.
func (c cursor) before(r Record) bool {
	if c.isZero() {
		return true
	}
	return r.Start.Before(c.start) || (r.Start.Equal(c.start) && r.ID < c.id)
}

func cursorOf(r Record) string {
	raw := strconv.FormatInt(r.Start.UnixMicro(), 10) + "." + strconv.FormatInt(r.ID, 10)
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// parseCursor decodes the opaque Before value a client got as Page.Next.
func parseCursor(s string) (cursor, error) {
	if s == "" {
		return cursor{}, nil
	}
	bad := func(why string) (cursor, error) {
		return cursor{}, &QueryError{Field: "before", Reason: fmt.Sprintf("%s; pass the \"next\" value of the previous page unchanged", why)}
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return bad("not a cursor")
	}
	us, id, ok := strings.Cut(string(raw), ".")
	if !ok {
		return bad("malformed cursor")
	}
	micros, err1 := strconv.ParseInt(us, 10, 64)
	n, err2 := strconv.ParseInt(id, 10, 64)
	if err1 != nil || err2 != nil || n < 0 {
		return bad("malformed cursor")
	}
	start := time.UnixMicro(micros).UTC()
	if start.Year() < 1 || start.Year() > 9999 {
		return bad("cursor time out of range")
	}
	return cursor{start: start, id: n}, nil
}
