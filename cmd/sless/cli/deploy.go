package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/buildkit/sourcezip"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/client"
	"sless.dev/sless/rules"
)

func init() { subcommands = append(subcommands, newDeployCmd) }

type deployFlags struct {
	name, runtime, entrypoint string
	env                       []string
	secretEnv, secretFiles    []string
	timeout                   time.Duration
	memoryMB                  int32
	wait, async               bool
	waitTimeout               time.Duration
	// noTraffic keeps the traffic where it is; tag gives the new revision a route.
	noTraffic bool
	tag       string
}

func newDeployCmd() *cobra.Command {
	var f deployFlags
	cmd := &cobra.Command{
		Use:   "deploy [dir]",
		Short: "Create or update a function from a folder, upload its code and wait until it is Ready",
		Long: `deploy zips the folder (default: the current one), creates the function (named after the
folder unless --name is given) or updates the settings given as flags, uploads the zip and
waits until the new code is Ready, printing each phase and the build's own output (compiler,
pip, npm). A failed build exits with code 3 and the compiler's message.

A new function's runtime comes from --runtime, else from the folder's sless.yaml (which
sless init writes: "runtime: python3.12"), else from the files: go.mod or *.go → go1.25,
handler.py or requirements.txt → python3.11, handler.js or package.json → nodejs20. An
existing function keeps its runtime, environment and limits unless a flag changes them.

Secrets of the namespace (sless secret create) reach the function by name, never by value:
--secret-env DB_PASSWORD=db/password sets a variable to the value of a key, --secret-file db
mounts every key of db as a file in ` + rules.SecretMountDir + `/db (--secret-file db:/srv/db
elsewhere). sless.yaml may list them too:

  secret_env:
    - {name: DB_PASSWORD, secret: db, key: password}
  secret_files:
    - {secret: tls}
    - {secret: db, path: /srv/db}

The flags add to sless.yaml's lists (a flag's entry replaces the file's for the same
variable, or for the same secret's files), and the result replaces the function's list; with
neither, the function keeps its own. "secret_env: []" in sless.yaml removes them all.

Left out of the zip (as by terraform's sless_function): ` + strings.Join(sourcezip.DefaultIgnore, " ") + `,
then what .slessignore lists, in .dockerignore's syntax: one pattern a line, from the
folder's root, with * ? [...] and ** for any number of folders; !pattern takes a path back;
# starts a comment. A symbolic link that is not left out is an error. Dependencies are
installed by the build from go.mod, requirements.txt or package.json.

Each deploy that changes what runs makes a new revision (sless revisions). --no-traffic keeps
the calls on the revisions that serve now; --tag canary gives the new revision the tag canary
(X-Sless-Tag: canary, or the host canary-<function>.<namespace>.<functions domain>) to try it
before sless traffic moves calls to it.`,
		Example: `  sless deploy
  sless deploy ./hello --env GREETING=hi --timeout 30s
  sless deploy --name api --runtime python3.12
  sless deploy --secret-env DB_PASSWORD=db/password --secret-file tls
  sless deploy --no-traffic --tag canary`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			return runDeploy(cmd, f, dir)
		},
	}
	f.bind(cmd)
	return cliCommand(cmd)
}

func (f *deployFlags) bind(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.name, "name", "", "function name (default: the folder's name)")
	fs.StringVar(&f.runtime, "runtime", "", "go, python, node or a runtime name (default for a new function: sless.yaml's runtime, else detected from the files; an existing one keeps its own)")
	fs.StringVar(&f.entrypoint, "entrypoint", "", "module.function (default: the runtime's, handler.handle or Handle)")
	fs.StringArrayVar(&f.env, "env", nil, "environment variable K=V, repeated; replaces all of the function's variables")
	fs.StringArrayVar(&f.secretEnv, "secret-env", nil, "NAME=secret/key: the variable NAME holds the value of key in the secret; repeated, merged over sless.yaml's secret_env, and the result replaces the function's list")
	fs.StringArrayVar(&f.secretFiles, "secret-file", nil, "secret[:/dir]: every key of the secret as a file in dir (default "+rules.SecretMountDir+"/<secret>); repeated, merged over sless.yaml's secret_files, and the result replaces the function's list")
	fs.DurationVar(&f.timeout, "timeout", 0, "limit of one invocation, e.g. 30s (0: none)")
	fs.Int32Var(&f.memoryMB, "memory", 0, "memory in MB")
	fs.BoolVar(&f.async, "async", false, "take asynchronous calls (sless invoke --async, Prefer: respond-async); --async=false turns them off")
	fs.BoolVar(&f.wait, "wait", true, "wait until Ready, streaming the build; --wait=false returns after the upload")
	fs.DurationVar(&f.waitTimeout, "wait-timeout", 10*time.Minute, "how long to wait for Ready (time held back for a build slot not counted)")
	fs.BoolVar(&f.noTraffic, "no-traffic", false, "the new revision gets no traffic: what follows latest stays on the revision latest is now")
	fs.StringVar(&f.tag, "tag", "", "give the new revision this tag (a route of its own, no share of the calls)")
	_ = cmd.RegisterFlagCompletionFunc("runtime", cobra.FixedCompletions(
		append([]string{"go", "python", "node"}, buildkit.RuntimeNames()...), cobra.ShellCompDirectiveNoFileComp))
}

// fields are the settings the flags change (nil: unchanged).
func (f deployFlags) fields(cmd *cobra.Command) (api.FunctionFields, error) {
	var out api.FunctionFields
	set := cmd.Flags().Changed
	if f.runtime != "" {
		rt, err := lookupRuntime(f.runtime)
		if err != nil {
			return out, err
		}
		out.Runtime = &rt.Name
	}
	if set("entrypoint") {
		out.Entrypoint = &f.entrypoint
	}
	if set("env") {
		env, err := parseEnv(f.env)
		if err != nil {
			return out, err
		}
		out.EnvVars = &env
	}
	if set("secret-env") {
		refs, err := parseSecretEnv(f.secretEnv)
		if err != nil {
			return out, err
		}
		out.SecretEnv = &refs
	}
	if set("secret-file") {
		refs, err := parseSecretFiles(f.secretFiles)
		if err != nil {
			return out, err
		}
		out.SecretFiles = &refs
	}
	if set("timeout") {
		sec := math.Ceil(f.timeout.Seconds())
		if sec < 0 || sec > math.MaxInt32 {
			return out, usageErrorf("--timeout %s: want 0 (none) or a positive duration", f.timeout)
		}
		out.TimeoutSec = ptr.To(int32(sec))
	}
	if set("memory") {
		out.MemoryMB = &f.memoryMB
	}
	if set("async") {
		out.Async = &api.AsyncFields{Enabled: &f.async}
	}
	return out, nil
}

// parseEnv reads K=V pairs; a value may hold '=' and be empty.
func parseEnv(pairs []string) (map[string]string, error) {
	env := map[string]string{}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, usageErrorf("--env %q: want NAME=value", p)
		}
		env[k] = v
	}
	return env, nil
}

func runDeploy(cmd *cobra.Command, f deployFlags, dir string) error {
	ctx, progress := cmd.Context(), cmd.ErrOrStderr()
	fields, err := f.fields(cmd)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("folder %s: %w", dir, err)
	}
	name := firstOf(f.name, filepath.Base(abs))
	p, err := loadProject(abs)
	if err != nil {
		return err
	}
	p.addSecretRefs(&fields)
	zipped, files, err := sourcezip.Zip(abs)
	if err != nil {
		return err
	}
	s, err := connect(ctx, "")
	if err != nil {
		return err
	}
	if err := ensureFunction(ctx, s, progress, name, abs, fields, f); err != nil {
		return err
	}
	since := time.Now()
	fn, err := s.c.UploadSource(ctx, s.ns, name, bytes.NewReader(zipped))
	var apiErr *client.Error
	if errors.As(err, &apiErr) && apiErr.Field == "source" {
		return failedError(fmt.Errorf("function %s: the upload was refused: %s", name, apiErr.Message))
	}
	if err != nil {
		return s.objectErr(err, "function", name)
	}
	fmt.Fprintf(progress, "uploaded %s (%s), sha256 %.12s\n", plural(files, "file"), byteSize(len(zipped)), fn.Source.SHA256)
	if !f.wait {
		fmt.Fprintf(cmd.OutOrStdout(), "function %s: uploaded; `sless get function %s` shows when it is Ready\n", name, name)
		return nil
	}
	fn, err = waitDeployed(ctx, s, progress, name, fn.Status, since, f.waitTimeout)
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "function %s is Ready: %s\n", name, fn.Status.URL)
	return nil
}

// ensureFunction creates the function, or updates the fields the flags set on an existing
// one. Without --runtime a new function's runtime is the one dir's sless.yaml names, else
// the one detected from its files; an existing function keeps its own.
func ensureFunction(ctx context.Context, s *session, progress io.Writer, name, dir string, fields api.FunctionFields, f deployFlags) error {
	existing, err := s.c.GetFunction(ctx, s.ns, name)
	if err == nil && (f.noTraffic || f.tag != "") {
		traffic, perr := pinTraffic(existing.Traffic, existing.Status.LatestReadyRevision, f.noTraffic, f.tag)
		if perr != nil {
			return perr
		}
		fields.Traffic = &traffic
	}
	switch {
	case client.IsNotFound(err) && f.noTraffic:
		return usageErrorf("--no-traffic: function %s does not exist yet, so there is no revision to keep the traffic on; deploy it once without --no-traffic", name)
	case client.IsNotFound(err):
		if f.tag != "" {
			traffic, perr := pinTraffic(rules.DefaultTraffic(), "", false, f.tag)
			if perr != nil {
				return perr
			}
			fields.Traffic = &traffic
		}
		if fields.Runtime == nil {
			rt, err := newRuntime(dir)
			if err != nil {
				return err
			}
			fields.Runtime = &rt
		}
		if _, err := s.c.CreateFunction(ctx, s.ns, api.CreateFunction{Name: name, FunctionFields: fields}); err != nil {
			return s.explain(err, "creating function "+name)
		}
		fmt.Fprintf(progress, "function %s created (%s)\n", name, *fields.Runtime)
		return nil
	case err != nil:
		var apiErr *client.Error
		if errors.As(err, &apiErr) && apiErr.Field == "name" {
			return usageErrorf("function %s: %w; the name is the folder's unless --name gives one", name, err)
		}
		return s.objectErr(err, "function", name)
	}
	if fields.Runtime == nil {
		// A folder of another language than the function's would fail in the build, later and
		// less clearly.
		rt, known := buildkit.Runtimes[existing.Runtime]
		if lang, err := detectLanguage(dir); err == nil && known && rt.Language != lang {
			return usageErrorf("function %s runs %s but %s holds %s code: pass --runtime %s to change it, or --name for another function",
				name, existing.Runtime, dir, lang, lang)
		}
	}
	// What sless.yaml lists is sent on every deploy; a list the function already has is no
	// change.
	if fields.SecretEnv != nil && slices.Equal(*fields.SecretEnv, existing.SecretEnv) {
		fields.SecretEnv = nil
	}
	if fields.SecretFiles != nil && sameSecretFiles(*fields.SecretFiles, existing.SecretFiles) {
		fields.SecretFiles = nil
	}
	if fields == (api.FunctionFields{}) {
		return nil
	}
	if _, err := s.c.UpdateFunction(ctx, s.ns, name, fields); err != nil {
		return s.explain(err, "updating function "+name)
	}
	fmt.Fprintf(progress, "function %s updated\n", name)
	return nil
}

// waitDeployed prints each phase change and the build's own output until the function is
// Ready for the new code, or its build failed (exit code 3 with the compiler's message), or
// timeout passed, not counting the time the operator held the build back for a slot (as
// the Terraform provider's wait). prev is the status the upload answered with: an older
// build's failure must not count.
func waitDeployed(ctx context.Context, s *session, out io.Writer, name string, prev api.FunctionStatus, since time.Time, timeout time.Duration) (api.Function, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	build := followBuild(ctx, s, out, name, since)
	defer build.stop()
	var last string
	fn, err := s.c.WaitReady(ctx, s.ns, name, prev, client.WaitOptions{Timeout: timeout, Interval: pollInterval, Progress: func(fn api.Function, done bool) {
		if done {
			build.stop() // the build's last lines before the outcome
		}
		if state := phaseOf(fn.Status); state != last {
			build.printf("function %s: %s\n", name, state)
			last = state
		}
	}})
	var buildErr *client.BuildError
	switch {
	case errors.As(err, &buildErr):
		msg := strings.TrimRight(buildErr.Output, "\n")
		why := ":\n" + msg
		if build.shown(msg) {
			why = " (the build's output above says why)"
		}
		return fn, failedError(fmt.Errorf("function %s failed to build%s\nfix the code and deploy again; `sless logs %s --build` shows the whole build output",
			name, why, name))
	case err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled):
		err = s.objectErr(err, "function", name)
	}
	return fn, waitError(err, "the deploy of function "+name, timeout, last, "sless describe function "+name)
}

// phaseOf words a status for the progress lines. A Ready phase that is not ready is about
// an older configuration, so only its message ("applying the latest change") is current.
func phaseOf(st api.FunctionStatus) string {
	phase := firstOf(st.Phase, api.PhasePending)
	switch {
	case phase == api.PhaseReady && !st.Ready:
		return firstOf(st.Message, "updating")
	case st.Message == "":
		return phase
	}
	return phase + " (" + st.Message + ")"
}

// buildFollower prints the build's own output as the build writes it, between the phase
// lines of the wait.
type buildFollower struct {
	mu       sync.Mutex
	out      io.Writer
	lastLine time.Time
	lines    []string // the build's own lines printed, trimmed
	cancel   func()
	done     chan struct{}
	once     sync.Once
}

// Once the wait is over, stop lets lines still on their way arrive: it ends the stream after
// buildQuiet without a line, at most buildDrain after it was called.
const (
	buildQuiet = 300 * time.Millisecond
	buildDrain = 3 * time.Second
)

// followBuild streams the function's latest build log from since on. It is best effort: a
// server without build logs just shows no lines, and the wait reports the outcome anyway.
func followBuild(ctx context.Context, s *session, out io.Writer, name string, since time.Time) *buildFollower {
	ctx, cancel := context.WithCancel(ctx)
	b := &buildFollower{out: out, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		_ = s.c.BuildLogs(ctx, s.ns, name, client.LogOptions{Since: since.UTC().Format(time.RFC3339Nano), Follow: true}, func(l api.LogLine) error {
			b.printf("  | %s\n", l.Line)
			b.mu.Lock()
			b.lines = append(b.lines, strings.TrimSpace(l.Line))
			b.mu.Unlock()
			return nil
		})
	}()
	return b
}

func (b *buildFollower) printf(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fmt.Fprintf(b.out, format, args...)
	b.lastLine = time.Now()
}

// shown reports whether the build's lines printed so far hold every line of text (each as a
// whole line or the end of one, as in "[sless] build failed: <error>"), so a failure need not
// print the compiler's message again.
func (b *buildFollower) shown(text string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	some := false
	for _, want := range strings.Split(text, "\n") {
		if want = strings.TrimSpace(want); want == "" {
			continue
		}
		if !slices.ContainsFunc(b.lines, func(line string) bool { return strings.HasSuffix(line, want) }) {
			return false
		}
		some = true
	}
	return some
}

func (b *buildFollower) stop() {
	b.once.Do(func() {
		_ = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, buildDrain, true, func(context.Context) (bool, error) {
			b.mu.Lock()
			defer b.mu.Unlock()
			return time.Since(b.lastLine) >= buildQuiet, nil
		})
		b.cancel()
		<-b.done
	})
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// byteSize is n bytes for people (812 B, 1.2 KiB, 3.4 MiB).
func byteSize(n int) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
