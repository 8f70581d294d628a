package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/client"
)

func init() { subcommands = append(subcommands, newJobsCmd, newTriggersCmd) }

func newJobsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "jobs", Short: "Run jobs (declare them with Terraform or the API)"}
	cmd.AddCommand(newJobsRunCmd())
	return cliCommand(cmd)
}

func newJobsRunCmd() *cobra.Command {
	var (
		event       string
		waitRun     bool
		waitTimeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "run <job> [--event JSON | --event @file]",
		Short: "Run a job once more and print its result",
		Long: `run raises the job's run_id, which runs it again (with --event as its new event), waits
for the run to end and prints its result. A failed run exits with code 3, its error and the
tail of its output on stderr.`,
		Example: `  sless jobs run nightly
  sless jobs run resize --event '{"image":"a.png"}' -o json`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeNamesOf(jobKind),
	}
	out := bindOutput(cmd, formatTable, formatJSON, formatYAML)
	fs := cmd.Flags()
	fs.StringVar(&event, "event", "", "the run's event: JSON, @file, or @- for stdin (default: the job's)")
	fs.BoolVar(&waitRun, "wait", true, "wait for the run to end; --wait=false returns once it is requested")
	fs.DurationVar(&waitTimeout, "wait-timeout", 15*time.Minute, "how long to wait for the run")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := out.check(); err != nil {
			return err
		}
		var fields api.JobFields
		if cmd.Flags().Changed("event") {
			data, err := readBody(firstOf(event, "{}"), cmd.InOrStdin())
			if err != nil {
				return err
			}
			if !json.Valid(data) {
				return usageErrorf("--event is not JSON: %.80q", data)
			}
			fields.Event = ptr.To(json.RawMessage(data))
		}
		s, err := connect(cmd.Context(), "")
		if err != nil {
			return err
		}
		name := args[0]
		j, err := s.c.GetJob(cmd.Context(), s.ns, name)
		if err != nil {
			return s.objectErr(err, "job", name)
		}
		run := max(j.RunID, j.Status.ObservedRunID) + 1
		fields.RunID = &run
		if _, err := s.c.UpdateJob(cmd.Context(), s.ns, name, fields); err != nil {
			return s.objectErr(err, "job", name)
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "job %s: run %d requested\n", name, run)
		if !waitRun {
			return nil
		}
		// A read that failed because ctx ended answers (false, nil): the poll returns ctx's error
		// (Canceled, or DeadlineExceeded at the timeout).
		err = wait.PollUntilContextTimeout(cmd.Context(), pollInterval, waitTimeout, true, func(ctx context.Context) (bool, error) {
			got, err := s.c.GetJob(ctx, s.ns, name)
			if err != nil {
				if ctx.Err() != nil {
					return false, nil
				}
				return false, s.objectErr(err, "job", name)
			}
			j = got
			return client.RunDone(j, run), nil
		})
		if err != nil {
			return waitError(err, fmt.Sprintf("run %d of job %s", run, name), waitTimeout, j.Status.Phase, "sless describe job "+name)
		}
		if err := out.write(cmd.OutOrStdout(), j, func(w io.Writer) error {
			if j.Status.Result != "" {
				_, err := fmt.Fprintln(w, j.Status.Result)
				return err
			}
			return nil
		}); err != nil {
			return err
		}
		if j.Status.Phase == api.JobFailed {
			msg := firstOf(j.Status.Error, "the run failed")
			if j.Status.Output != "" {
				msg += "\noutput:\n" + indent(j.Status.Output)
			}
			return failedError(fmt.Errorf("job %s run %d failed: %s", name, run, msg))
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "job %s: run %d %s in %s\n", name, run, strings.ToLower(j.Status.Phase), msDuration(j.Status.DurationMs))
		return nil
	}
	return cmd
}

func newTriggersCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "triggers", Short: "Enable or disable triggers in place (declare them with Terraform or the API)"}
	for _, v := range []struct {
		verb, short string
		enabled     bool
	}{
		{"enable", "Let triggers call their functions again", true},
		{"disable", "Stop triggers from calling their functions but keep them (disabling all http triggers of a function closes its URL)", false},
	} {
		cmd.AddCommand(&cobra.Command{
			Use:               v.verb + " <trigger>...",
			Short:             v.short,
			Args:              cobra.MinimumNArgs(1),
			ValidArgsFunction: completeNamesOf(triggerKind),
			RunE: func(cmd *cobra.Command, args []string) error {
				s, err := connect(cmd.Context(), "")
				if err != nil {
					return err
				}
				for _, name := range args {
					if _, err := s.c.SetTriggerEnabled(cmd.Context(), s.ns, name, v.enabled); err != nil {
						return s.objectErr(err, "trigger", name)
					}
					fmt.Fprintf(cmd.OutOrStdout(), "trigger %s %sd\n", name, v.verb)
				}
				return nil
			},
		})
	}
	return cliCommand(cmd)
}
