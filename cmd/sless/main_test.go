package main

import (
	"os"
	"testing"
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
	os.Exit(m.Run())
}
