// Package handler answers the event and request it was given, for the contract test.
package handler

func Handle(event, request map[string]interface{}) interface{} {
	return map[string]interface{}{"event": event, "request": request}
}
