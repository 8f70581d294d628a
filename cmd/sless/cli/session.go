package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"sless.dev/sless/gateway/client"
)

// The commands for function authors (login, init, deploy, invoke, logs, ls, get, describe,
// rm, jobs, triggers) share what this file holds: where the API is, the token, the tenant
// namespace, and errors that say what to do.

// Exit codes of the CLI, documented in docs/cli.md: a script tells a mistake in its own
// command line (2) and a function, job or build that failed (3) from anything else (1).
const (
	ExitUsage  = 2
	ExitFailed = 3
)

// ExitError lets a command choose the exit status of sless while still printing one clear
// message: the CLI's codes above, and the dispatcher's fire mode's own.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// ExitCode is the exit status of sless for err: 0 for none, an ExitError's code, else 1.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*ExitError); ok {
		return ee.Code
	}
	return 1
}

func usageErrorf(format string, args ...any) error {
	return &ExitError{Code: ExitUsage, Err: fmt.Errorf(format, args...)}
}

func failedError(err error) error { return &ExitError{Code: ExitFailed, Err: err} }

// cliCommand makes cmd and its subcommands answer bad flags and arguments with exit code 2.
func cliCommand(cmd *cobra.Command) *cobra.Command {
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageErrorf("%w (see %s --help)", err, c.CommandPath())
	})
	var wrap func(c *cobra.Command)
	wrap = func(c *cobra.Command) {
		if args := c.Args; args != nil {
			c.Args = func(c *cobra.Command, a []string) error {
				if err := args(c, a); err != nil {
					return usageErrorf("%w (usage: %s)", err, c.UseLine())
				}
				return nil
			}
		}
		for _, sub := range c.Commands() {
			wrap(sub)
		}
	}
	wrap(cmd)
	return cmd
}

// Config is what `sless login` (and `sless dev --login`) saves.
type Config struct {
	Endpoint string `json:"endpoint"`
	Token    string `json:"token,omitempty"`
}

// configPath is <user config dir>/sless/config.json (~/.config/sless/config.json on Linux,
// following XDG_CONFIG_HOME).
func configPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("finding the user config directory (set HOME or XDG_CONFIG_HOME): %w", err)
	}
	return filepath.Join(dir, "sless", "config.json"), nil
}

// loadConfig reads the saved config (none: empty) with SLESS_ENDPOINT and SLESS_TOKEN on top;
// from names where the endpoint came from, for error messages.
func loadConfig() (cfg Config, from string, err error) {
	path, err := configPath()
	if err != nil {
		return cfg, "", err
	}
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(data, &cfg); err != nil {
			return cfg, "", fmt.Errorf("config %s is not valid JSON (%v): run `sless login` to write it again", path, err)
		}
		from = path
	case !errors.Is(err, os.ErrNotExist):
		return cfg, "", fmt.Errorf("reading config: %w", err)
	}
	if v := os.Getenv("SLESS_ENDPOINT"); v != "" {
		cfg.Endpoint, from = v, "SLESS_ENDPOINT"
	}
	if v := os.Getenv("SLESS_TOKEN"); v != "" {
		cfg.Token = v
	}
	return cfg, from, nil
}

// SaveConfig writes cfg readable by the user only (the token is a credential).
func SaveConfig(cfg Config) (string, error) {
	path, err := configPath()
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("creating %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil { // MkdirAll leaves an existing folder as it was
		return "", fmt.Errorf("securing %s: %w", dir, err)
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return "", err
	}
	return path, WriteSecret(path, append(data, '\n'))
}

// WriteSecret writes a credential readable by the user only, whole or not at all: the CLI's
// config, and sless dev's signing key and tokens.
func WriteSecret(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// session is a connection to the API as the saved (or environment's) identity.
type session struct {
	c        *client.Client
	ns       string
	endpoint string
	from     string // where the endpoint came from
}

// connect opens a session; ns "" asks the API for the token's tenant namespace.
func connect(ctx context.Context, ns string) (*session, error) {
	cfg, from, err := loadConfig()
	if err != nil {
		return nil, err
	}
	if cfg.Endpoint == "" {
		return nil, errors.New("no sless endpoint configured: run `sless login --endpoint URL --token-file FILE`, `sless dev --login`, or set SLESS_ENDPOINT and SLESS_TOKEN")
	}
	c, err := client.New(cfg.Endpoint, cfg.Token, nil)
	if err != nil {
		return nil, fmt.Errorf("%w (from %s)", err, from)
	}
	s := &session{c: c, ns: ns, endpoint: cfg.Endpoint, from: from}
	if ns == "" {
		id, err := c.WhoAmI(ctx)
		if client.IsNotFound(err) {
			return nil, fmt.Errorf("signing in: %w; is %s (from %s) a sless endpoint?", err, cfg.Endpoint, from)
		}
		if err != nil {
			return nil, s.explain(err, "signing in")
		}
		s.ns = id.Namespace
	}
	return s, nil
}

// explain names what failed and adds the fix for the usual causes.
func (s *session) explain(err error, what string) error {
	var apiErr *client.Error
	switch {
	case errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("%s: %w; the token is missing, invalid or expired: run `sless login` with a new one (or `sless dev --login`)", what, err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%s: nothing answers at %s (from %s): start `sless dev`, or point `sless login --endpoint` at your gateway", what, s.endpoint, s.from)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// objectErr is explain for an object of kind ("function", "trigger", "job"): a 404 says how
// to see the ones that exist.
func (s *session) objectErr(err error, kind, name string) error {
	if client.IsNotFound(err) {
		return fmt.Errorf("%s %s: %w; `sless ls %ss` lists them", kind, name, err, kind)
	}
	return s.explain(err, kind+" "+name)
}
