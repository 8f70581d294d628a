// Command sless is the single binary of the platform: each component is a subcommand.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"sless.dev/sless/cmd/sless/cli"
)

// subcommands is filled by the init functions of the files beside this one, one file per
// server, so wiring a server never means editing another server's file; the commands for
// function authors come from package cli.
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
	root.AddCommand(cli.Commands()...)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sless:", err)
		os.Exit(cli.ExitCode(err))
	}
}
