// Package size is a sub-package imported through the user's own module path.
package size

import "fmt"

// Of returns the length of v's string form.
func Of(v interface{}) int { return len(fmt.Sprint(v)) }
