package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/client"
	"sless.dev/sless/triggers"
)

// objectKind is one kind of API object as ls, get, describe and rm see it; kind[O] is the
// one implementation, so each verb is written once for functions, triggers, jobs and secrets.
type objectKind interface {
	names() []string // singular first, then the plural and a short form
	list(ctx context.Context, s *session) (any, table, error)
	get(ctx context.Context, s *session, name string) (any, table, error)
	describe(ctx context.Context, s *session, name string) (any, func(io.Writer) error, error)
	remove(ctx context.Context, s *session, name string) error
}

type kind[O any] struct {
	singular, plural, short string
	listFn                  func(*client.Client, context.Context, string) ([]O, error)
	getFn                   func(*client.Client, context.Context, string, string) (O, error)
	deleteFn                func(*client.Client, context.Context, string, string) error
	header                  []string
	row                     func(o O, now time.Time) []string
	// details is what describe adds to the object (a function's triggers and invocations)
	// and how it prints as text.
	details func(ctx context.Context, s *session, o O) (any, func(io.Writer) error, error)
	// conflictHint, when set, is the fix rm adds to a 409 (the object is in use).
	conflictHint func(name string) string
}

func (k kind[O]) names() []string { return []string{k.singular, k.plural, k.short} }

func (k kind[O]) list(ctx context.Context, s *session) (any, table, error) {
	objs, err := k.listFn(s.c, ctx, s.ns)
	if err != nil {
		return nil, table{}, s.explain(err, "listing "+k.plural)
	}
	if objs == nil {
		objs = []O{} // JSON [] rather than null
	}
	return objs, k.table(objs...), nil
}

func (k kind[O]) get(ctx context.Context, s *session, name string) (any, table, error) {
	o, err := k.getFn(s.c, ctx, s.ns, name)
	if err != nil {
		return nil, table{}, s.objectErr(err, k.singular, name)
	}
	return o, k.table(o), nil
}

func (k kind[O]) table(objs ...O) table {
	t, now := table{header: k.header}, time.Now()
	for _, o := range objs {
		t.rows = append(t.rows, k.row(o, now))
	}
	return t
}

func (k kind[O]) describe(ctx context.Context, s *session, name string) (any, func(io.Writer) error, error) {
	o, err := k.getFn(s.c, ctx, s.ns, name)
	if err != nil {
		return nil, nil, s.objectErr(err, k.singular, name)
	}
	return k.details(ctx, s, o)
}

func (k kind[O]) remove(ctx context.Context, s *session, name string) error {
	if err := k.deleteFn(s.c, ctx, s.ns, name); err != nil {
		if client.IsConflict(err) && k.conflictHint != nil {
			return fmt.Errorf("%s %s: %w; %s", k.singular, name, err, k.conflictHint(name))
		}
		return s.objectErr(err, k.singular, name)
	}
	return nil
}

var (
	functionKind = kind[api.Function]{
		singular: "function", plural: "functions", short: "fn",
		listFn: (*client.Client).ListFunctions, getFn: (*client.Client).GetFunction, deleteFn: (*client.Client).DeleteFunction,
		header: []string{"NAME", "RUNTIME", "PHASE", "READY", "URL", "AGE"},
		row: func(f api.Function, now time.Time) []string {
			return []string{f.Name, f.Runtime, f.Status.Phase, strconv.FormatBool(f.Status.Ready), f.Status.URL, age(f.CreatedAt, now)}
		},
		details: describeFunction,
	}
	triggerKind = kind[api.Trigger]{
		singular: "trigger", plural: "triggers", short: "tr",
		listFn: (*client.Client).ListTriggers, getFn: (*client.Client).GetTrigger, deleteFn: (*client.Client).DeleteTrigger,
		header: []string{"NAME", "TYPE", "FUNCTION", "ENABLED", "ACTIVE", "SOURCE", "AGE"},
		row: func(t api.Trigger, now time.Time) []string {
			return []string{t.Name, t.Type, t.Function, strconv.FormatBool(t.Enabled), strconv.FormatBool(t.Status.Active), t.Status.Source, age(t.CreatedAt, now)}
		},
		details: describeTrigger,
	}
	jobKind = kind[api.Job]{
		singular: "job", plural: "jobs", short: "jb",
		listFn: (*client.Client).ListJobs, getFn: (*client.Client).GetJob, deleteFn: (*client.Client).DeleteJob,
		header: []string{"NAME", "RUNS", "RUN", "PHASE", "DURATION", "AGE"},
		row: func(j api.Job, now time.Time) []string {
			return []string{j.Name, jobTarget(j), strconv.FormatInt(j.Status.ObservedRunID, 10), j.Status.Phase, msDuration(j.Status.DurationMs), age(j.CreatedAt, now)}
		},
		details: describeJob,
	}
	objectKinds = []objectKind{functionKind, triggerKind, jobKind, secretKind}
)

// kindNamed finds a kind by any of its names.
func kindNamed(name string) (objectKind, error) {
	for _, k := range objectKinds {
		if slices.Contains(k.names(), name) {
			return k, nil
		}
	}
	return nil, usageErrorf("no kind %q: want %s", name, kindChoices("plural", ", ", " or "))
}

// kindChoices lists the kinds by their singular or plural names: "functions, triggers, jobs
// or secrets" (sep ", ", last " or "), "function|trigger|job|secret" (both "|").
func kindChoices(form, sep, last string) string {
	var names []string
	for _, k := range objectKinds {
		if form == "plural" {
			names = append(names, k.names()[1])
		} else {
			names = append(names, k.names()[0])
		}
	}
	return strings.Join(names[:len(names)-1], sep) + last + names[len(names)-1]
}

// jobTarget is what a job runs: a function, or its own code in a runtime.
func jobTarget(j api.Job) string {
	if j.Function != "" {
		return "function " + j.Function
	}
	return j.Runtime + " code"
}

func msDuration(ms int64) string {
	if ms == 0 {
		return ""
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

func timeoutText(sec int32) string {
	if sec == 0 {
		return "none"
	}
	return (time.Duration(sec) * time.Second).String()
}

// recentInvocations is how many invocations describe function shows.
const recentInvocations = 10

// FunctionDetails is describe function's answer: the function, the triggers that call it and
// its latest invocations.
type FunctionDetails struct {
	Function    api.Function     `json:"function"`
	Triggers    []api.Trigger    `json:"triggers"`
	Invocations []api.Invocation `json:"invocations"`
}

func describeFunction(ctx context.Context, s *session, f api.Function) (any, func(io.Writer) error, error) {
	d := FunctionDetails{Function: f, Triggers: []api.Trigger{}}
	all, err := s.c.ListTriggers(ctx, s.ns)
	if err != nil {
		return nil, nil, s.explain(err, "listing the triggers of function "+f.Name)
	}
	for _, t := range all {
		if t.Function == f.Name {
			d.Triggers = append(d.Triggers, t)
		}
	}
	inv, err := s.c.ListInvocations(ctx, s.ns, f.Name, recentInvocations, "")
	if err != nil {
		return nil, nil, s.objectErr(err, "function", f.Name)
	}
	d.Invocations = inv.Invocations
	return d, func(w io.Writer) error {
		err := describeFields(w, f.Name, f.Namespace, f.CreatedAt, func(fl fields) {
			fl.add("Runtime", f.Runtime)
			fl.add("Entrypoint", f.Entrypoint)
			fl.add("Phase", f.Status.Phase)
			fl.add("Ready", f.Status.Ready)
			fl.add("Message", f.Status.Message)
			fl.add("URL", f.Status.URL)
			fl.add("Image", f.Status.Image)
			fl.add("Protocol", f.Protocol)
			fl.addTime("Last build", f.Status.LastBuildTime)
			fl.add("Memory", fmt.Sprintf("%d MB", f.MemoryMB))
			fl.add("Timeout", timeoutText(f.TimeoutSec))
			fl.add("Replicas", fmt.Sprintf("%d to %d", f.MinReplicas, f.MaxReplicas))
			fl.add("Env", strings.Join(slices.Sorted(maps.Keys(f.EnvVars)), ", ")) // names only: values may be secrets
			if f.Source != nil {
				fl.add("Source", "sha256:"+f.Source.SHA256)
			}
			fl.add("Revisions", fmt.Sprintf("latest created %s, latest ready %s", f.Status.LatestCreatedRevision, f.Status.LatestReadyRevision))
			fl.add("Traffic", describeTraffic(f.Status.Traffic))
			if ro := f.Status.Rollout; ro != nil {
				fl.add("Rollout", ro.Phase+": "+ro.Message)
			}
		})
		if err != nil {
			return err
		}
		if f.Status.LastBuildError != "" {
			fmt.Fprintf(w, "\nBuild error:\n%s\n", indent(f.Status.LastBuildError))
		}
		if len(f.SecretEnv)+len(f.SecretFiles) > 0 { // names only, never a value
			fmt.Fprintln(w, "\nSecrets:")
			for _, e := range f.SecretEnv {
				fmt.Fprintf(w, "  %s\n", secretEnvText(e))
			}
			for _, sf := range f.SecretFiles {
				fmt.Fprintf(w, "  %s\n", secretFileText(sf))
			}
		}
		fmt.Fprintln(w, "\nTriggers:")
		if err := indented(w, triggerKind.table(d.Triggers...)); err != nil {
			return err
		}
		fmt.Fprintln(w, "\nRecent invocations:")
		t := table{header: []string{"START", "KIND", "STATUS", "HTTP", "DURATION", "COLD", "TRIGGER", "ERROR"}}
		for _, i := range d.Invocations {
			httpStatus := ""
			if i.HTTPStatus != 0 {
				httpStatus = strconv.Itoa(i.HTTPStatus)
			}
			t.rows = append(t.rows, []string{i.Start.Local().Format("2006-01-02 15:04:05"), i.Kind, i.Status, httpStatus,
				fmt.Sprintf("%.1fms", i.DurationMs), strconv.FormatBool(i.ColdStart), i.Trigger, i.Error})
		}
		return indented(w, t)
	}, nil
}

func describeTrigger(_ context.Context, _ *session, t api.Trigger) (any, func(io.Writer) error, error) {
	return t, func(w io.Writer) error {
		return describeFields(w, t.Name, t.Namespace, t.CreatedAt, func(fl fields) {
			fl.add("Type", t.Type)
			fl.add("Function", t.Function)
			fl.add("Enabled", t.Enabled)
			fl.add("Active", t.Status.Active)
			fl.add("Message", t.Status.Message)
			fl.add("URL", t.Status.URL)
			if k, ok := triggers.Lookup(t.Type); ok && k.Routes() {
				fl.add("Require auth", t.RequireAuth)
			}
			fl.add("Schedule", t.Schedule)
			fl.add("Timezone", t.Timezone)
			fl.add("Queue", t.Queue)
			fl.add("Dead-letter queue", t.DeadLetterQueue)
			if t.MaxAttempts != 0 {
				fl.add("Attempts", fmt.Sprintf("%d, backoff %dms", t.MaxAttempts, t.BackoffMs))
			}
			fl.addTime("Last fired", t.Status.LastFireTime)
		})
	}, nil
}

func describeJob(_ context.Context, _ *session, j api.Job) (any, func(io.Writer) error, error) {
	return j, func(w io.Writer) error {
		err := describeFields(w, j.Name, j.Namespace, j.CreatedAt, func(fl fields) {
			fl.add("Runs", jobTarget(j))
			fl.add("Event", string(j.Event))
			fl.add("Timeout", timeoutText(j.TimeoutSec))
			fl.add("Run", fmt.Sprintf("%d (requested %d)", j.Status.ObservedRunID, j.RunID))
			fl.add("Phase", j.Status.Phase)
			fl.addTime("Started", j.Status.StartTime)
			fl.add("Duration", msDuration(j.Status.DurationMs))
			fl.add("Result", j.Status.Result)
			fl.add("Error", j.Status.Error)
		})
		if err != nil {
			return err
		}
		if j.Status.Output != "" {
			fmt.Fprintf(w, "\nOutput:\n%s\n", indent(j.Status.Output))
		}
		return nil
	}, nil
}

// describeFields prints an object's fields aligned: its name and namespace, those of its
// kind (kindFields) and when it was created.
func describeFields(w io.Writer, name, namespace string, created time.Time, kindFields func(fields)) error {
	fl := newFields(w)
	fl.add("Name", name)
	fl.add("Namespace", namespace)
	kindFields(fl)
	fl.addTime("Created", &created)
	return fl.flush()
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

// indented prints t two spaces in, under a describe heading.
func indented(w io.Writer, t table) error {
	if len(t.rows) == 0 {
		_, err := fmt.Fprintln(w, "  none")
		return err
	}
	var b strings.Builder
	if err := t.write(&b); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, indent(b.String()))
	return err
}

func init() {
	subcommands = append(subcommands, newLsCmd, newGetCmd, newDescribeCmd, newRmCmd)
}

func newLsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:               "ls [" + kindChoices("plural", "|", "|") + "]",
		Short:             "List the " + kindChoices("plural", ", ", " or ") + " of your namespace (functions when no kind is given)",
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completeKinds,
	}
	out := bindOutput(cmd, formatTable, formatJSON, formatYAML)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		kind := "functions"
		if len(args) == 1 {
			kind = args[0]
		}
		return runGet(cmd, out, kind, "")
	}
	return cliCommand(cmd)
}

func newGetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get " + kindChoices("singular", "|", "|") + " [name]",
		Short: "Show one object (or, without a name, all of a kind) as a table, JSON or YAML",
		Example: `  sless get function hello
  sless get function hello -o yaml
  sless get triggers -o json`,
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: completeKindThenNames,
	}
	out := bindOutput(cmd, formatTable, formatJSON, formatYAML)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		name := ""
		if len(args) == 2 {
			name = args[1]
		}
		return runGet(cmd, out, args[0], name)
	}
	return cliCommand(cmd)
}

// kindSession finds the kind named, checks the output format and connects: what get and
// describe need before asking for objects.
func kindSession(cmd *cobra.Command, out *outputFlag, kindName string) (objectKind, *session, error) {
	k, err := kindNamed(kindName)
	if err != nil {
		return nil, nil, err
	}
	if err := out.check(); err != nil {
		return nil, nil, err
	}
	s, err := connect(cmd.Context(), "")
	if err != nil {
		return nil, nil, err
	}
	return k, s, nil
}

// runGet prints one object, or all of a kind when name is "".
func runGet(cmd *cobra.Command, out *outputFlag, kindName, name string) error {
	k, s, err := kindSession(cmd, out, kindName)
	if err != nil {
		return err
	}
	var (
		v any
		t table
	)
	if name == "" {
		v, t, err = k.list(cmd.Context(), s)
	} else {
		v, t, err = k.get(cmd.Context(), s, name)
	}
	if err != nil {
		return err
	}
	if name == "" && len(t.rows) == 0 && out.format == formatTable {
		fmt.Fprintf(cmd.ErrOrStderr(), "no %s in namespace %s\n", k.names()[1], s.ns)
		return nil
	}
	return out.write(cmd.OutOrStdout(), v, t.write)
}

func newDescribeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:               "describe " + kindChoices("singular", "|", "|") + " <name>",
		Short:             "Show an object in full: status and settings; for a function also its URL, triggers, secrets and recent invocations; for a secret who uses it",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: completeKindThenNames,
	}
	out := bindOutput(cmd, formatTable, formatJSON, formatYAML)
	cmd.RunE = func(cmd *cobra.Command, args []string) error { return runDescribe(cmd, out, args[0], args[1]) }
	return cliCommand(cmd)
}

// runDescribe prints the object of the kind named in full.
func runDescribe(cmd *cobra.Command, out *outputFlag, kindName, name string) error {
	k, s, err := kindSession(cmd, out, kindName)
	if err != nil {
		return err
	}
	v, text, err := k.describe(cmd.Context(), s, name)
	if err != nil {
		return err
	}
	return out.write(cmd.OutOrStdout(), v, text)
}

func newRmCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rm [" + kindChoices("singular", "|", "|") + "] <name>...",
		Short: "Delete objects (a function with everything it owns: its builds, logs and instances; a secret nothing references); names alone are functions",
		Example: `  sless rm hello
  sless rm trigger nightly`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeKindThenNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			// A first word that is no kind's name starts a list of functions.
			if _, err := kindNamed(args[0]); err != nil || len(args) == 1 {
				return runRm(cmd, "function", args)
			}
			return runRm(cmd, args[0], args[1:])
		},
	}
	return cliCommand(cmd)
}

// runRm deletes the objects of the kind named, in order, stopping at the first that fails.
func runRm(cmd *cobra.Command, kindName string, names []string) error {
	k, err := kindNamed(kindName)
	if err != nil {
		return err
	}
	s, err := connect(cmd.Context(), "")
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := k.remove(cmd.Context(), s, name); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s %s deleted\n", k.names()[0], name)
	}
	return nil
}
