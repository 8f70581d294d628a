package testkit

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"sless.dev/sless/rules"
)

// SignedWith reports whether r arrived signed with key just now, over what it carries: its
// method, path as sent and every X-Sless-* header (the wrappers' check, runtimes/README.md).
func SignedWith(r *http.Request, key []byte) bool {
	sig := r.Header.Values(rules.HeaderSignature)
	if len(sig) != 1 {
		return false
	}
	ts, err := strconv.ParseInt(strings.TrimPrefix(strings.Split(sig[0], ",")[0], "t="), 10, 64)
	return err == nil && time.Since(time.Unix(ts, 0)) < time.Minute &&
		sig[0] == rules.Signature(key, ts, r.Method, rules.SignaturePath(r.URL), r.Header)
}
