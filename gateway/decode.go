package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/labstack/echo/v4"
)

// maxJSONBody caps a JSON request body; specs are small.
const maxJSONBody = 1 << 20

// decodeJSON decodes exactly one JSON object from r into v, rejecting unknown fields, wrong
// types, trailing data and oversized bodies with errors that name the field at fault.
func decodeJSON(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return &httpError{Code: http.StatusBadRequest, Msg: "unexpected data after the JSON object; send exactly one object"}
	}
	return nil
}

// jsonError turns a decoding error into a 400 (or 413) that says what to fix.
func jsonError(err error) error {
	var (
		syntax   *json.SyntaxError
		typ      *json.UnmarshalTypeError
		tooLarge *http.MaxBytesError
	)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return err // the request timed out; the error handler says so
	case errors.As(err, &tooLarge):
		return &httpError{Code: http.StatusRequestEntityTooLarge, Msg: fmt.Sprintf("request body larger than %d bytes", tooLarge.Limit)}
	case errors.Is(err, io.EOF):
		return &httpError{Code: http.StatusBadRequest, Msg: "empty request body; send a JSON object"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &httpError{Code: http.StatusBadRequest, Msg: "malformed JSON: the body ends early"}
	case errors.As(err, &syntax):
		return &httpError{Code: http.StatusBadRequest, Msg: fmt.Sprintf("malformed JSON at byte %d: %v", syntax.Offset, err)}
	case errors.As(err, &typ):
		field := jsonField(typ.Field)
		if field == "" {
			return &httpError{Code: http.StatusBadRequest, Msg: fmt.Sprintf("the body must be a JSON object, not %s", typ.Value)}
		}
		return &httpError{Code: http.StatusBadRequest, Field: field, Msg: fmt.Sprintf("%s must be %s, not %s", field, typeName(typ.Type.String()), typ.Value)}
	}
	// encoding/json reports unknown fields only as text: `json: unknown field "x"`.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name = strings.Trim(name, `"`)
		return &httpError{Code: http.StatusBadRequest, Field: name, Msg: fmt.Sprintf("unknown field %q; see the API reference at /v1/openapi.yaml", name)}
	}
	return &httpError{Code: http.StatusBadRequest, Msg: "malformed JSON: " + err.Error()}
}

// jsonField drops the embedded Go struct names encoding/json puts in front of a field path
// ("FunctionFields.memory_mb" → "memory_mb"); JSON names of the wire model are lower case.
func jsonField(path string) string {
	for {
		head, rest, ok := strings.Cut(path, ".")
		if !ok || head == "" || head[0] < 'A' || head[0] > 'Z' {
			return path
		}
		path = rest
	}
}

// typeName renders Go types of the wire model in JSON terms.
func typeName(goType string) string {
	goType = strings.TrimPrefix(goType, "*")
	switch {
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"):
		return "an integer"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	case goType == "string":
		return "a string"
	case goType == "bool":
		return "true or false"
	case strings.HasPrefix(goType, "map"):
		return "an object"
	}
	return "a " + goType
}

// httpError is an error with the status and field to answer with.
type httpError struct {
	Code  int
	Field string
	Msg   string
	Err   error // internal cause, logged, never sent
}

func (e *httpError) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *httpError) Unwrap() error { return e.Err }

// decodeBody decodes a request's JSON body with decodeJSON, capped at maxJSONBody.
func decodeBody(c echo.Context, v any) error {
	return decodeJSON(http.MaxBytesReader(c.Response(), c.Request().Body, maxJSONBody), v)
}
