package cli

import (
	"context"
	"time"

	"github.com/spf13/cobra"
)

// Shell completion: cobra's `sless completion bash|zsh|fish|powershell` completes commands
// and flags; these complete object names by asking the API, within a short time so a slow
// or stopped server never hangs the shell.

const completionTimeout = 2 * time.Second

// objectNames lists the names of kind's objects (the first column of its table), nil when the
// API cannot be asked.
func objectNames(k objectKind) []string {
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	defer cancel()
	s, err := connect(ctx, "")
	if err != nil {
		return nil
	}
	_, t, err := k.list(ctx, s)
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(t.rows))
	for _, r := range t.rows {
		names = append(names, r[0])
	}
	return names
}

// completeNamesOf completes the first argument with the names of kind's objects.
func completeNamesOf(k objectKind) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return objectNames(k), cobra.ShellCompDirectiveNoFileComp
	}
}

func completeKinds(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	for _, k := range objectKinds {
		names = append(names, k.names()[:2]...)
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// completeKindThenNames completes `get|describe|rm <kind> <name>`.
func completeKindThenNames(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) == 0 {
		return completeKinds(cmd, args, toComplete)
	}
	k, err := kindNamed(args[0])
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return objectNames(k), cobra.ShellCompDirectiveNoFileComp
}
