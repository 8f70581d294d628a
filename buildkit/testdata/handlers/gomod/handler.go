// Package handler is a test function with its own go.mod (any module name works).
package handler

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"

	"example.com/actions/internal/size"
)

type apiResponse struct {
	StatusCode      int               `json:"statusCode"`
	Headers         map[string]string `json:"headers"`
	Body            string            `json:"body"`
	IsBase64Encoded bool              `json:"isBase64Encoded,omitempty"`
}

func Handle(event, request map[string]interface{}) interface{} {
	switch event["action"] {
	case "text":
		return "hello " + fmt.Sprint(event["name"])
	case "error":
		return errors.New("boom")
	case "panic":
		panic("kaboom")
	case "sleep":
		secs, _ := event["seconds"].(float64)
		time.Sleep(time.Duration(secs * float64(time.Second)))
		if marker, ok := event["marker"].(string); ok {
			_ = os.WriteFile(marker, []byte("finished"), 0o644)
		}
		return map[string]interface{}{"slept": secs}
	case "respond":
		return event["response"]
	case "struct":
		// A typed response, shaped as aws-lambda-go's events.APIGatewayProxyResponse.
		return apiResponse{StatusCode: 202, Headers: map[string]string{"X-Typed": "yes"}, Body: "accepted"}
	case "size":
		return map[string]interface{}{"bytes": size.Of(event["data"])}
	}
	return map[string]interface{}{"event": event, "request": request, "id": uuid.NewString()}
}
