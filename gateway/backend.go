package gateway

import (
	"errors"
	"fmt"
	"net/http"

	"sless.dev/sless/gateway/backend"
)

func invalid(field, format string, args ...any) error {
	return &backend.InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// statusOf maps a backend or validation error to an HTTP status and the API field at fault;
// 0 means an internal error.
func statusOf(err error) (int, string) {
	var (
		nf *backend.NotFoundError
		cf *backend.ConflictError
		iv *backend.InvalidError
		qe *backend.QuotaError
		ue *backend.UnsupportedError
	)
	switch {
	case errors.As(err, &qe):
		return http.StatusForbidden, ""
	case errors.As(err, &nf):
		return http.StatusNotFound, ""
	case errors.As(err, &cf):
		return http.StatusConflict, ""
	case errors.As(err, &iv):
		return http.StatusBadRequest, iv.Field
	case errors.As(err, &ue):
		return http.StatusNotImplemented, ""
	}
	return 0, ""
}
