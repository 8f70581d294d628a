// Package handler is a test function with its own go.mod (any module name works).
package handler

import (
	"errors"
	"fmt"
	"io"
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
	case "stream":
		return stream(event)
	case "astream":
		return reader(event)
	}
	return map[string]interface{}{"event": event, "request": request, "id": uuid.NewString()}
}

// stream sends count items delay seconds apart on a channel (SSE events with sse set); it
// fails after the first with fail set.
func stream(event map[string]interface{}) <-chan interface{} {
	count, delay := 3, time.Duration(0)
	if c, ok := event["count"].(float64); ok {
		count = int(c)
	}
	if d, ok := event["delay"].(float64); ok {
		delay = time.Duration(d * float64(time.Second))
	}
	sse, _ := event["sse"].(bool)
	fail, _ := event["fail"].(bool)
	ch := make(chan interface{})
	go func() {
		defer close(ch)
		if sse {
			ch <- apiResponse{StatusCode: 200, Headers: map[string]string{"Content-Type": "text/event-stream", "X-Stream": "yes"}}
		}
		for i := 0; i < count; i++ {
			if i > 0 {
				time.Sleep(delay)
			}
			switch {
			case fail && i == 1:
				ch <- errors.New("stream broke")
				return
			case sse && i%2 == 0:
				ch <- map[string]interface{}{"event": "tick", "id": fmt.Sprint(i), "data": map[string]int{"i": i}}
			case sse:
				ch <- fmt.Sprintf("line %d\nsecond", i)
			default:
				ch <- fmt.Sprintf("chunk %d\n", i)
			}
		}
	}()
	return ch
}

// reader is the plain stream as an io.Reader.
func reader(event map[string]interface{}) io.Reader {
	event["sse"], event["fail"] = false, false
	r, w := io.Pipe()
	go func() {
		for item := range stream(event) {
			if _, err := io.WriteString(w, item.(string)); err != nil {
				return
			}
		}
		w.Close()
	}()
	return r
}
