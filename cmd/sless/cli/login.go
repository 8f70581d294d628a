package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"sless.dev/sless/gateway/client"
)

func init() { subcommands = append(subcommands, newLoginCmd) }

// defaultEndpoint is where `sless dev` listens unless told otherwise.
const defaultEndpoint = "http://127.0.0.1:8080"

func newLoginCmd() *cobra.Command {
	var endpoint, token, tokenFile string
	cmd := &cobra.Command{
		Use:   "login [--endpoint URL] [--token T | --token-file F]",
		Short: "Save the API endpoint and your token for the other commands",
		Long: `login checks the token against the API and saves the endpoint and the token in the user's
config directory (` + "`~/.config/sless/config.json`" + ` on Linux, readable by you only).
SLESS_ENDPOINT and SLESS_TOKEN, when set, win over the saved values.

--token-file - reads the token from stdin; prefer it (or SLESS_TOKEN) to --token, which other
users of the machine can see in the process list.`,
		Example: `  sless login --endpoint http://127.0.0.1:8080 --token-file .sless/token
  sless dev --login   # sless dev logs the CLI in to itself`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if token != "" && tokenFile != "" {
				return usageErrorf("give --token or --token-file, not both")
			}
			saved, _, _ := loadConfig() // an unreadable config is what login replaces
			cfg := Config{Endpoint: firstOf(endpoint, saved.Endpoint, defaultEndpoint), Token: firstOf(token, saved.Token)}
			if tokenFile != "" {
				var err error
				if cfg.Token, err = readToken(tokenFile, cmd.InOrStdin()); err != nil {
					return err
				}
			}
			if cfg.Token == "" {
				return usageErrorf("no token: give --token-file FILE (sless dev writes <data-dir>/token) or set SLESS_TOKEN")
			}
			c, err := client.New(cfg.Endpoint, cfg.Token, nil)
			if err != nil {
				return usageErrorf("--endpoint: %w", err)
			}
			id, err := c.WhoAmI(cmd.Context())
			if err != nil {
				s := &session{endpoint: cfg.Endpoint, from: "--endpoint"}
				return s.explain(err, "checking the token at "+cfg.Endpoint)
			}
			path, err := SaveConfig(cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "logged in to %s as %s (namespace %s); saved in %s\n", cfg.Endpoint, id.Subject, id.Namespace, path)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&endpoint, "endpoint", "", "the sless API, e.g. https://sless.example.com (default: the saved one, else "+defaultEndpoint+")")
	fs.StringVar(&token, "token", "", "the token (JWT); visible to other users in the process list, prefer --token-file")
	fs.StringVar(&tokenFile, "token-file", "", "read the token from this file (- for stdin)")
	return cliCommand(cmd)
}

// readToken reads a token file (or stdin for "-"), trimmed.
func readToken(path string, stdin io.Reader) (string, error) {
	var (
		data []byte
		err  error
	)
	if path == "-" {
		data, err = io.ReadAll(io.LimitReader(stdin, 64<<10))
	} else {
		data, err = os.ReadFile(path)
	}
	if errors.Is(err, os.ErrNotExist) {
		return "", usageErrorf("--token-file %s does not exist", path)
	}
	if err != nil {
		return "", fmt.Errorf("reading the token: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

func firstOf(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}
