// Package handler answers the same JSON as test/bench/buildkit/bare.
package handler

func Handle(event map[string]interface{}) interface{} {
	name, _ := event["name"].(string)
	return map[string]interface{}{"message": "hello, " + name}
}
