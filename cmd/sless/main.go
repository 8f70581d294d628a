// Command sless is the single binary of the platform: each component is a subcommand.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// subcommands is filled by the init functions of the files beside this one, one file per
// component, so wiring a component never means editing another component's file.
var subcommands []func() *cobra.Command

func main() {
	root := &cobra.Command{
		Use:           "sless",
		Short:         "sless: serverless functions on Kubernetes with KEDA, or on one machine with `sless dev`",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	for _, mk := range subcommands {
		root.AddCommand(mk())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sless:", err)
		os.Exit(exitCode(err))
	}
}

// exitError lets a subcommand choose its exit status (e.g. the cron fire mode reports a failed
// invocation with a distinct code) while still printing one clear message.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func exitCode(err error) int {
	if ee, ok := err.(*exitError); ok {
		return ee.code
	}
	return 1
}
