// Package handler is a test function without a go.mod: buildkit generates one.
package handler

import (
	"errors"
	"time"

	"sless/fn/handler/greet"
)

func Handle(event map[string]interface{}) interface{} {
	switch event["action"] {
	case "text":
		return greet.Hello(event["name"])
	case "error":
		return errors.New("boom")
	case "sleep":
		secs, _ := event["seconds"].(float64)
		time.Sleep(time.Duration(secs * float64(time.Second)))
		return map[string]interface{}{"slept": secs}
	}
	return map[string]interface{}{"event": event}
}
