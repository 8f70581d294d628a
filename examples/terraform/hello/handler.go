// Package handler is the function deployed by the Terraform example: it greets the caller
// named in the event (or GREETING's default).
package handler

import "os"

// Handle answers with a greeting; event is the JSON body of the request or the job's event.
func Handle(event map[string]interface{}) interface{} {
	name, _ := event["name"].(string)
	if name == "" {
		name = os.Getenv("DEFAULT_NAME")
	}
	return map[string]interface{}{"message": os.Getenv("GREETING") + ", " + name}
}
