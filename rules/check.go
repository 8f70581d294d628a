package rules

import (
	"fmt"
	"strings"
)

// CheckRange refuses an integer field outside lo-hi.
func CheckRange(field string, v, lo, hi int64) *FieldError {
	if v < lo || v > hi {
		return &FieldError{field, fmt.Sprintf("%d is out of range; use %d-%d", v, lo, hi)}
	}
	return nil
}

// CheckQueue checks a RabbitMQ queue name: at most MaxQueueLength bytes of printable
// characters; "" only when it is not required.
func CheckQueue(field, q string, required bool) *FieldError {
	switch {
	case q == "" && required:
		return &FieldError{field, fmt.Sprintf("a queue name of 1-%d characters is required", MaxQueueLength)}
	case len(q) > MaxQueueLength || strings.ContainsFunc(q, func(c rune) bool { return c < 0x20 || c == 0x7f }):
		return &FieldError{field, fmt.Sprintf("%q is not a queue name: use at most %d printable characters", q, MaxQueueLength)}
	}
	return nil
}
