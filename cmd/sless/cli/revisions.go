package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
)

func init() {
	subcommands = append(subcommands, newRevisionsCmd, newTrafficCmd, newRollbackCmd)
}

func newRevisionsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "revisions <function>",
		Short: "List a function's revisions: what each runs, whether it is ready, its share of the traffic and its tags",
		Example: `  sless revisions hello
  sless revisions hello -o yaml`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeNamesOf(functionKind),
	}
	out := bindOutput(cmd, formatTable, formatJSON, formatYAML)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := out.check(); err != nil {
			return err
		}
		s, err := connect(cmd.Context(), "")
		if err != nil {
			return err
		}
		revs, err := s.c.ListRevisions(cmd.Context(), s.ns, args[0])
		if err != nil {
			return s.objectErr(err, "function", args[0])
		}
		return out.write(cmd.OutOrStdout(), revs, revisionTable(revs, time.Now()).write)
	}
	return cliCommand(cmd)
}

func revisionTable(revs []api.Revision, now time.Time) table {
	t := table{header: []string{"REVISION", "PHASE", "TRAFFIC", "TAGS", "SOURCE", "AGE", "MESSAGE"}}
	for _, r := range revs {
		src := r.Config.Image
		if r.Config.Source != nil {
			src = "sha256:" + short12(r.Config.Source.SHA256)
		}
		t.rows = append(t.rows, []string{r.Name, r.Status.Phase, strconv.Itoa(int(r.Percent)) + "%", strings.Join(r.Tags, ","),
			src, age(r.CreatedAt, now), r.Status.Message})
	}
	return t
}

func short12(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

func newTrafficCmd() *cobra.Command {
	var tags []string
	cmd := &cobra.Command{
		Use:   "traffic <function> <revision|latest>=<percent>...",
		Short: "Split a function's calls between its revisions (a route change: nothing is rebuilt or restarted)",
		Long: `traffic replaces the function's traffic: each <revision|latest>=<percent> sends that share of
its calls to a revision (hello-3) or to the newest ready one (latest); the percents sum to 100.
--tag <tag>=<revision|latest> gives a revision a route of its own (the header X-Sless-Tag: <tag>
on its URL, and the host <tag>-<function>.<namespace>.<functions domain>), with no share of
the calls unless it has one.`,
		Example: `  sless traffic hello hello-3=90 latest=10
  sless traffic hello hello-3=100 --tag canary=latest
  sless traffic hello latest=100`,
		Args:              cobra.MinimumNArgs(2),
		ValidArgsFunction: completeNamesOf(functionKind),
	}
	cmd.Flags().StringArrayVar(&tags, "tag", nil, "<tag>=<revision|latest>, repeated")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		traffic, err := parseTraffic(args[1:], tags)
		if err != nil {
			return err
		}
		s, err := connect(cmd.Context(), "")
		if err != nil {
			return err
		}
		fn, err := s.c.UpdateFunction(cmd.Context(), s.ns, args[0], api.FunctionFields{Traffic: &traffic})
		if err != nil {
			return s.objectErr(err, "function", args[0])
		}
		fmt.Fprintf(cmd.OutOrStdout(), "function %s: traffic %s\n", args[0], describeTraffic(rules.ResolveTraffic(fn.Traffic, "")))
		return nil
	}
	return cliCommand(cmd)
}

// parseTraffic reads <revision|latest>=<percent> entries and <tag>=<revision|latest> tags
// into a traffic list; the server checks the rest (sums, revisions, tag names).
func parseTraffic(shares, tags []string) ([]api.TrafficTarget, error) {
	var out []api.TrafficTarget
	index := map[string]int{}
	entry := func(target string) *api.TrafficTarget {
		if i, ok := index[target]; ok {
			return &out[i]
		}
		t := api.TrafficTarget{Revision: target}
		if target == "latest" {
			t = api.TrafficTarget{Latest: true}
		}
		index[target] = len(out)
		out = append(out, t)
		return &out[len(out)-1]
	}
	for _, a := range shares {
		target, pct, ok := strings.Cut(a, "=")
		n, err := strconv.ParseInt(strings.TrimSuffix(pct, "%"), 10, 32)
		if !ok || target == "" || err != nil {
			return nil, usageErrorf("traffic %q: want <revision|latest>=<percent>, e.g. hello-3=90 or latest=10", a)
		}
		if _, dup := index[target]; dup {
			return nil, usageErrorf("traffic: %s is given twice", target)
		}
		entry(target).Percent = int32(n)
	}
	for _, a := range tags {
		tag, target, ok := strings.Cut(a, "=")
		if !ok || tag == "" || target == "" {
			return nil, usageErrorf("--tag %q: want <tag>=<revision|latest>, e.g. canary=latest", a)
		}
		e := entry(target)
		if e.Tag != "" {
			// A second tag for one target gets an entry of its own, with no share.
			out = append(out, api.TrafficTarget{Revision: e.Revision, Latest: e.Latest, Tag: tag})
			continue
		}
		e.Tag = tag
	}
	return out, nil
}

// describeTraffic prints a function's traffic: "hello-3 90%, latest 10% tag canary", with
// latest named by its revision once resolved ("hello-4 (latest) 10%").
func describeTraffic(resolved []api.ResolvedTarget) string {
	var parts []string
	for _, t := range resolved {
		rev := t.Revision
		switch {
		case t.Latest && rev == "":
			rev = "latest"
		case t.Latest:
			rev += " (latest)"
		}
		p := fmt.Sprintf("%s %d%%", rev, t.Percent)
		if t.Tag != "" {
			p += " tag " + t.Tag
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ", ")
}

func newRollbackCmd() *cobra.Command {
	var to string
	cmd := &cobra.Command{
		Use:   "rollback <function>",
		Short: "Send all of a function's traffic to an earlier revision in one step",
		Long: `rollback moves all traffic to one revision at once (tags stay on their revisions): --to names
it, else it is the newest ready revision older than the newest one that has traffic now — the
revision that served everything before the latest rollout. New deploys then get no traffic
until ` + "`sless traffic <function> latest=100`" + `.`,
		Example: `  sless rollback hello
  sless rollback hello --to hello-2`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeNamesOf(functionKind),
	}
	cmd.Flags().StringVar(&to, "to", "", "the revision that gets all traffic")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		s, err := connect(cmd.Context(), "")
		if err != nil {
			return err
		}
		fn, err := s.c.Rollback(cmd.Context(), s.ns, args[0], to)
		if err != nil {
			return s.objectErr(err, "function", args[0])
		}
		target := to
		if len(fn.Traffic) > 0 {
			target = fn.Traffic[0].Revision
		}
		fmt.Fprintf(cmd.OutOrStdout(), "function %s: all traffic on %s\n", args[0], target)
		return nil
	}
	return cliCommand(cmd)
}

// pinTraffic is the traffic `sless deploy --no-traffic --tag <tag>` sets before it uploads:
// entries that follow latest are pinned to the revision latest is now (so the new one gets
// none of their share), and tag, when given, follows latest with no share.
func pinTraffic(current []api.TrafficTarget, latestReady string, noTraffic bool, tag string) ([]api.TrafficTarget, error) {
	var out []api.TrafficTarget
	for _, t := range current {
		switch {
		case t.Tag == tag && tag != "":
			continue // the tag moves to the new revision
		case noTraffic && t.Latest:
			if latestReady == "" {
				return nil, usageErrorf("--no-traffic: the function has no ready revision to keep its traffic on; deploy it once without --no-traffic")
			}
			t.Latest, t.Revision = false, latestReady
		}
		out = append(out, t)
	}
	if tag != "" {
		if err := rules.CheckTag(tag); err != nil {
			return nil, usageErrorf("--tag: %v", err)
		}
		out = append(out, api.TrafficTarget{Latest: true, Tag: tag})
	}
	return out, nil
}
