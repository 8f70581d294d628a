package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/client"
)

func init() { subcommands = append(subcommands, newLogsCmd) }

const formatText = "text"

// logTime is how a log line's time prints: local, to the millisecond.
const logTime = "2006-01-02 15:04:05.000"

func newLogsCmd() *cobra.Command {
	var (
		opts  client.LogOptions
		build bool
		job   string
	)
	cmd := &cobra.Command{
		Use:   "logs <function> [-f] [--since 10m] [--tail N] [--build] | logs --job <name>",
		Short: "Print what a function's instances, its latest build or a job's latest run printed",
		Long: `logs prints the lines a function's instances wrote to stdout and stderr, every instance
merged, oldest first, as "time instance stream line" (-o json: the API's JSON lines). --build
prints the latest build's own output instead, --job <name> the latest run of a job. -f keeps
following new lines until Ctrl-C.

sless dev keeps a function's lines until it is deleted (a rotated 4 MiB file plus one older),
so they outlive a scale to zero; a cluster reads the logs of the running pods, which go with
the pods.`,
		Example: `  sless logs hello -f
  sless logs hello --since 10m --tail 50
  sless logs hello --build
  sless logs --job nightly -o json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if build && job != "" {
				return errors.New("--build is a function's; give --build or --job, not both")
			}
			if job != "" {
				return cobra.NoArgs(cmd, args)
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		ValidArgsFunction: completeNamesOf(functionKind),
	}
	out := bindOutput(cmd, formatText, formatJSON)
	fs := cmd.Flags()
	fs.BoolVarP(&opts.Follow, "follow", "f", false, "keep printing new lines until Ctrl-C")
	fs.StringVar(&opts.Since, "since", "", "only lines newer than this: a duration such as 10m, or an RFC 3339 time")
	fs.IntVar(&opts.Tail, "tail", 0, "only the last N lines (default: all the server keeps, up to 10000)")
	fs.BoolVar(&build, "build", false, "the function's latest build output instead")
	fs.StringVar(&job, "job", "", "the latest run of this job instead of a function")
	_ = cmd.RegisterFlagCompletionFunc("job", completeNamesOf(jobKind))
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := out.check(); err != nil {
			return err
		}
		if opts.Tail < 0 {
			return usageErrorf("--tail %d: want a number of lines", opts.Tail)
		}
		s, err := connect(cmd.Context(), "")
		if err != nil {
			return err
		}
		kind, name, read := "function", job, s.c.FunctionLogs
		switch {
		case job != "":
			kind, read = "job", s.c.JobLogs
		case build:
			read = s.c.BuildLogs
		}
		if name == "" {
			name = args[0]
		}
		if err := read(cmd.Context(), s.ns, name, opts, logPrinter(cmd.OutOrStdout(), out.format)); err != nil {
			return s.objectErr(err, kind, name)
		}
		return nil
	}
	return cliCommand(cmd)
}

// logPrinter prints each line as text columns or as the API's JSON.
func logPrinter(w io.Writer, format string) func(api.LogLine) error {
	enc := json.NewEncoder(w)
	return func(l api.LogLine) error {
		if format == formatJSON {
			return enc.Encode(l)
		}
		_, err := fmt.Fprintf(w, "%s %s %s %s\n", l.Time.Local().Format(logTime), firstOf(l.Instance, "-"), firstOf(l.Stream, "-"), l.Line)
		return err
	}
}
