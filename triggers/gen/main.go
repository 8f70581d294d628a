// Command gen writes gateway/api/zz_generated.triggerkinds.go and the CRD's TriggerType
// (apis/v1alpha1/zz_generated.triggertype.go) from the trigger kinds' packages (make
// generate, before controller-gen; run from the repository's root).
package main

import (
	"log"
	"os"

	"sless.dev/sless/triggers"
)

func main() {
	// The generated files, relative to the repository's root.
	for path, source := range map[string]func() ([]byte, error){
		"gateway/api/zz_generated.triggerkinds.go":  triggers.DescribeSource,
		"apis/v1alpha1/zz_generated.triggertype.go": triggers.TypeSource,
	} {
		src, err := source()
		if err != nil {
			log.Fatalf("formatting %s: %v", path, err)
		}
		if err := os.WriteFile(path, src, 0o644); err != nil {
			log.Fatal(err)
		}
	}
}
