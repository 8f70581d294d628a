// Package greet is imported under the generated module path sless/fn/handler.
package greet

import "fmt"

// Hello greets name.
func Hello(name interface{}) string { return fmt.Sprintf("hello %v", name) }
