package cli

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/textproto"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/client"
	"sless.dev/sless/rules"
)

func init() { subcommands = append(subcommands, newInvokeCmd) }

type invokeFlags struct {
	data, method, path, namespace string
	headers                       []string
	verbose, async, wait          bool
	waitTimeout                   time.Duration
}

func newInvokeCmd() *cobra.Command {
	var f invokeFlags
	cmd := &cobra.Command{
		Use:   "invoke <function> [-d JSON | -d @file | < file]",
		Short: "Call a function through the gateway and print its answer",
		Long: `invoke calls /fn/<namespace>/<function>[--path] on the endpoint, with the body from -d (text,
@file, or @- for stdin) or from stdin when it is not a terminal, and prints the answer's body.
-v adds the status, the duration and whether the call waited for an instance to start (cold
start) on stderr. An answer of 400 or more exits with code 3 after printing the body.

--async queues the call (Prefer: respond-async; the function needs async enabled) and prints
the invocation the gateway accepted; with --wait it follows it to its outcome and prints the
result, exiting 3 when every attempt failed. Send -H 'Idempotency-Key: k' to make a retried
call the same invocation.

The token is sent for functions behind an http trigger with require_auth; the gateway never
passes it on to the function.`,
		Example: `  sless invoke hello -d '{"name":"you"}'
  sless invoke hello -d @event.json -v
  echo '{"name":"pipe"}' | sless invoke hello
  sless invoke api -X GET --path '/orders/7?full=1' -H 'Accept: text/plain'
  sless invoke report --async --wait -d '{"month":"2026-11"}'`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeNamesOf(functionKind),
		RunE:              func(cmd *cobra.Command, args []string) error { return runInvoke(cmd, f, args[0]) },
	}
	fs := cmd.Flags()
	fs.StringVarP(&f.data, "data", "d", "", "request body: text, @file, or @- for stdin (default: stdin when it is not a terminal, else none)")
	fs.StringArrayVarP(&f.headers, "header", "H", nil, "request header 'Name: value', repeated")
	fs.StringVarP(&f.method, "request", "X", http.MethodPost, "HTTP method")
	fs.StringVar(&f.path, "path", "", "path (and ?query) after the function's URL, e.g. /orders/7")
	fs.StringVarP(&f.namespace, "namespace", "n", "", "the function's namespace (default: your token's); call another tenant's public function without a token")
	fs.BoolVarP(&f.verbose, "verbose", "v", false, "print status, duration and cold start on stderr")
	fs.BoolVar(&f.async, "async", false, "queue the call and print the accepted invocation (Prefer: respond-async)")
	fs.BoolVar(&f.wait, "wait", false, "with --async: follow the invocation to its outcome and print the result")
	fs.DurationVar(&f.waitTimeout, "wait-timeout", 10*time.Minute, "with --wait: give up after this long")
	return cliCommand(cmd)
}

func runInvoke(cmd *cobra.Command, f invokeFlags, name string) error {
	header, err := parseHeaders(f.headers)
	if err != nil {
		return err
	}
	body, err := readBody(f.data, cmd.InOrStdin())
	if err != nil {
		return err
	}
	if body != nil && header.Get("Content-Type") == "" {
		header.Set("Content-Type", "application/json")
	}
	s, err := connect(cmd.Context(), f.namespace)
	if err != nil {
		return err
	}
	in := client.Invocation{Method: f.method, Path: f.path, Header: header}
	if body != nil {
		in.Body = bytes.NewReader(body)
	}
	if f.wait && !f.async {
		return usageErrorf("--wait follows an asynchronous call: add --async")
	}
	if f.async {
		in.Header.Set("Prefer", "respond-async")
	}
	start := time.Now()
	resp, err := s.c.Invoke(cmd.Context(), s.ns, name, in)
	if err != nil {
		return s.explain(err, "function "+name)
	}
	defer resp.Body.Close()
	if refused(resp) || (f.async && resp.StatusCode >= 400) {
		return gatewayRefusal(resp, name)
	}
	if f.async {
		return followAsync(cmd, s, name, resp, f)
	}
	out := &lastByteWriter{w: cmd.OutOrStdout()}
	if _, err := io.Copy(out, resp.Body); err != nil {
		return fmt.Errorf("function %s: reading the answer: %w", name, err)
	}
	if out.last != 0 && out.last != '\n' && isTerminal(out.w) {
		fmt.Fprintln(out) // keep the shell prompt off the answer's last line
	}
	if f.verbose {
		cold := firstOf(resp.Header.Get(rules.HeaderColdStart), "unknown")
		fmt.Fprintf(cmd.ErrOrStderr(), "status      %s\nduration    %s\ncold start  %s\n", resp.Status, time.Since(start).Round(100*time.Microsecond), cold)
	}
	if resp.StatusCode >= 400 {
		return failedError(fmt.Errorf("function %s answered %s", name, resp.Status))
	}
	return nil
}

// followAsync prints the invocation an asynchronous call was accepted as or, with --wait,
// follows it to its outcome: progress on stderr, the result on stdout.
func followAsync(cmd *cobra.Command, s *session, name string, resp *http.Response, f invokeFlags) error {
	var inv api.AsyncInvocation
	if err := json.NewDecoder(resp.Body).Decode(&inv); err != nil || inv.ID == "" {
		return fmt.Errorf("function %s: the gateway answered %s without an invocation: %v", name, resp.Status, err)
	}
	if !f.wait {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(inv)
	}
	ctx := cmd.Context()
	deadline := time.Now().Add(f.waitTimeout)
	seen := ""
	for {
		if state := fmt.Sprintf("%s (attempt %d of %d)", inv.Status, inv.Attempts, inv.MaxAttempts); state != seen {
			fmt.Fprintf(cmd.ErrOrStderr(), "invocation %s: %s\n", inv.ID, state)
			seen = state
		}
		if inv.Status == "succeeded" || inv.Status == "failed" {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("invocation %s of %s is still %s after %s; read it later: GET %s", inv.ID, name, inv.Status, f.waitTimeout, resp.Header.Get("Location"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		next, err := s.c.GetAsyncInvocation(ctx, s.ns, inv.ID)
		if err != nil {
			return s.explain(err, "invocation "+inv.ID)
		}
		inv = next
	}
	result := []byte(inv.Result)
	if inv.ResultBase64 {
		decoded, err := base64.StdEncoding.DecodeString(inv.Result)
		if err != nil {
			return fmt.Errorf("invocation %s: result: %w", inv.ID, err)
		}
		result = decoded
	}
	if _, err := cmd.OutOrStdout().Write(result); err != nil {
		return err
	}
	if inv.Status == "failed" {
		return failedError(fmt.Errorf("invocation %s of %s failed after %d attempts: %s", inv.ID, name, inv.Attempts, inv.Error))
	}
	return nil
}

// refused reports an error the gateway answered without calling the function: no such
// function, a URL closed by disabled triggers, a missing token, too many calls held. Answers
// of a function carry X-Sless-Cold-Start; a function that could not be reached (502) or did
// not answer in time (504) has failed, not been refused.
func refused(resp *http.Response) bool {
	_, proxied := resp.Header[textproto.CanonicalMIMEHeaderKey(rules.HeaderColdStart)]
	return !proxied && resp.StatusCode >= 400 && resp.StatusCode != http.StatusBadGateway && resp.StatusCode != http.StatusGatewayTimeout
}

// gatewayRefusal is the error for an answer refused names.
func gatewayRefusal(resp *http.Response, name string) error {
	var body api.Error
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(data, &body) != nil || body.Error == "" {
		body.Error = firstOf(strings.TrimSpace(string(data)), resp.Status)
	}
	err := fmt.Errorf("function %s: the gateway answered %s: %s", name, resp.Status, body.Error)
	switch resp.StatusCode {
	case http.StatusNotFound:
		return fmt.Errorf("%w; `sless ls functions` lists yours, `sless ls triggers` shows whether an http trigger is disabled", err)
	case http.StatusUnauthorized, http.StatusForbidden:
		return fmt.Errorf("%w; its http trigger requires a token: `sless login`", err)
	}
	return err
}

// parseHeaders reads 'Name: value' pairs (curl's -H form).
func parseHeaders(pairs []string) (http.Header, error) {
	h := http.Header{}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, ":")
		k = strings.TrimSpace(k)
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return nil, usageErrorf("-H %q: want 'Name: value'", p)
		}
		h.Add(textproto.CanonicalMIMEHeaderKey(k), strings.TrimSpace(v))
	}
	return h, nil
}

// readBody is the body -d names: literal text, @file, @- for stdin; without -d, stdin when it
// is a pipe or a file rather than a terminal; nil for none.
func readBody(data string, stdin io.Reader) ([]byte, error) {
	switch {
	case data == "@-":
		return readAll(stdin, "stdin")
	case strings.HasPrefix(data, "@"):
		b, err := os.ReadFile(data[1:])
		if errors.Is(err, fs.ErrNotExist) {
			return nil, usageErrorf("-d %s: no such file", data)
		}
		if err != nil {
			return nil, fmt.Errorf("-d %s: %w", data, err)
		}
		return b, nil
	case data != "":
		return []byte(data), nil
	case !isTerminal(stdin) && stdin != nil:
		b, err := readAll(stdin, "stdin")
		if len(b) == 0 {
			return nil, err
		}
		return b, err
	}
	return nil, nil
}

func readAll(r io.Reader, what string) ([]byte, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", what, err)
	}
	return b, nil
}

// isTerminal reports whether v is a character device such as a terminal (or /dev/null, which
// is as good as nothing to read).
func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&fs.ModeCharDevice != 0
}

// lastByteWriter remembers the last byte written.
type lastByteWriter struct {
	w    io.Writer
	last byte
}

func (l *lastByteWriter) Write(p []byte) (int, error) {
	n, err := l.w.Write(p)
	if n > 0 {
		l.last = p[n-1]
	}
	return n, err
}
