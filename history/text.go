package history

import (
	"strings"
	"unicode/utf8"
)

// cleanText returns s as valid UTF-8 without NUL bytes (PostgreSQL text rejects both) and at
// most max bytes long, cut on a rune boundary.
func cleanText(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "")
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
