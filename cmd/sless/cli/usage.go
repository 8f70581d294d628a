package cli

import (
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"sless.dev/sless/gateway/api"
)

func init() { subcommands = append(subcommands, newUsageCmd) }

func newUsageCmd() *cobra.Command {
	var from, to, by string
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Show what your namespace's invocations used: calls, errors, cold starts, duration, GB-seconds, bytes out",
		Long: `usage reads your namespace's usage from the platform's hourly rollups, per hour, UTC day or
function, with the window's total. The window is widened to whole UTC hours; it is the last
24 hours unless --from and --to (RFC 3339) say otherwise, at most 31 days by hour.
GB-seconds are memory_mb / 1024 × each call's duration rounded up to the millisecond.`,
		Example: `  sless usage
  sless usage --by function --from 2026-03-01T00:00:00Z --to 2026-04-01T00:00:00Z
  sless usage --by day -o json`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&from, "from", "", "start, RFC 3339 (default: 24 hours before --to)")
	cmd.Flags().StringVar(&to, "to", "", "end, exclusive, RFC 3339 (default: now)")
	cmd.Flags().StringVar(&by, "by", "hour", "a row per hour, day (UTC) or function")
	_ = cmd.RegisterFlagCompletionFunc("by", cobra.FixedCompletions([]string{"hour", "day", "function"}, cobra.ShellCompDirectiveNoFileComp))
	out := bindOutput(cmd, formatTable, formatJSON, formatYAML)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := out.check(); err != nil {
			return err
		}
		s, err := connect(cmd.Context(), "")
		if err != nil {
			return err
		}
		u, err := s.c.Usage(cmd.Context(), s.ns, from, to, by)
		if err != nil {
			return err
		}
		return out.write(cmd.OutOrStdout(), u, usageTable(u).write)
	}
	return cliCommand(cmd)
}

// usageTable is a row per group of u, then the total.
func usageTable(u api.Usage) table {
	t := table{header: []string{"HOUR", "INVOCATIONS", "ERRORS", "COLD STARTS", "DURATION (MS)", "GB-SECONDS", "BYTES OUT"}}
	switch u.By {
	case "day":
		t.header[0] = "DAY"
	case "function":
		t.header[0] = "FUNCTION"
	}
	figures := func(group string, f api.UsageFigures) []string {
		return []string{group, strconv.FormatInt(f.Invocations, 10), strconv.FormatInt(f.Errors, 10), strconv.FormatInt(f.ColdStarts, 10),
			strconv.FormatFloat(f.DurationMs, 'f', 3, 64), strconv.FormatFloat(f.GBSeconds, 'f', 6, 64), strconv.FormatInt(f.BytesOut, 10)}
	}
	for _, r := range u.Rows {
		group := r.Day + r.Function
		if r.Hour != nil {
			group = r.Hour.UTC().Format(time.RFC3339)
		}
		t.rows = append(t.rows, figures(group, r.UsageFigures))
	}
	t.rows = append(t.rows, figures("TOTAL "+u.From.UTC().Format(time.RFC3339)+" to "+u.To.UTC().Format(time.RFC3339), u.Total))
	return t
}
