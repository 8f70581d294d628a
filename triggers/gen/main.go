// Command gen writes gateway/api/zz_generated.triggerkinds.go from the trigger kinds'
// packages (make generate; run from the repository's root).
package main

import (
	"log"
	"os"

	"sless.dev/sless/triggers"
)

// path is the generated file, relative to the repository's root.
const path = "gateway/api/zz_generated.triggerkinds.go"

func main() {
	src, err := triggers.DescribeSource()
	if err != nil {
		log.Fatalf("formatting %s: %v", path, err)
	}
	if err := os.WriteFile(path, src, 0o644); err != nil {
		log.Fatal(err)
	}
}
