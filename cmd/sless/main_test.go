package main

import (
	"context"
	"fmt"
	"os"
	"testing"

	"sless.dev/sless/devplane"
)

// TestMain lets a test run this test binary as the sless command itself (SLESS_TEST_AS_CLI=1
// and the arguments after "--"), for journeys that kill it with SIGKILL.
func TestMain(m *testing.M) {
	if os.Getenv("SLESS_TEST_AS_CLI") == "1" {
		for i, a := range os.Args {
			if a == "--" {
				os.Args = append([]string{"sless"}, os.Args[i+1:]...)
				break
			}
		}
		main()
		os.Exit(0)
	}
	if os.Geteuid() == 0 {
		// Sandboxed Go builds lay it under their caches: compiled once per machine here,
		// before any test's build waits for it within its own bound.
		if err := devplane.WarmSharedCache(context.Background(), devplane.DefaultSharedCacheDir); err != nil {
			fmt.Fprintln(os.Stderr, "warming the shared Go build cache:", err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}
