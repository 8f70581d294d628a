// Package cli is the sless command line for function authors: login, init, deploy, invoke,
// logs, the generic verbs (ls, get, describe, rm) over functions, triggers, jobs and secrets,
// revisions, traffic and rollback, jobs run and triggers enable/disable. The root command in
// cmd/sless adds Commands beside the servers.
package cli

import "github.com/spf13/cobra"

// subcommands is filled by the init functions of the files beside this one, one file per
// command, so adding a command never means editing another command's file.
var subcommands []func() *cobra.Command

// Commands makes the commands for function authors, for the root command to add.
func Commands() []*cobra.Command {
	cmds := make([]*cobra.Command, 0, len(subcommands))
	for _, mk := range subcommands {
		cmds = append(cmds, mk())
	}
	return cmds
}
