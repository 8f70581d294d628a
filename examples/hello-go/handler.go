// Package handler is the hello example for the Go runtimes (go1.23, go1.25).
package handler

import (
	"fmt"

	"github.com/google/uuid"
)

// Handle greets the caller. event is the JSON request body; request holds the HTTP method,
// path, query, headers and traceparent (the one-parameter form Handle(event) works too).
func Handle(event, request map[string]interface{}) interface{} {
	name, _ := event["name"].(string)
	if name == "" {
		name = "world"
	}
	return map[string]interface{}{
		"message":    fmt.Sprintf("hello, %s", name),
		"request_id": uuid.NewString(),
		"method":     request["method"],
	}
}
