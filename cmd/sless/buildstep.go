package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"sless.dev/sless/buildkit"
)

func init() { subcommands = append(subcommands, newBuildStepCmd) }

// newBuildStepCmd holds the platform's own steps of a cluster build pod
// (scaling.MakeBuildJob): fetching the build context with the artifact store's credentials
// before kaniko runs, and pushing what kaniko built with the registry's after it exited.
// kaniko, between them, holds neither.
func newBuildStepCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:    "build-step",
		Short:  "Steps of a cluster build pod (run by the operator's build Jobs)",
		Hidden: true,
	}
	cmd.AddCommand(newFetchStepCmd(), newPushStepCmd())
	return cmd
}

func newFetchStepCmd() *cobra.Command {
	var (
		store    storeFlags
		key, out string
	)
	cmd := &cobra.Command{
		Use:   "fetch",
		Short: "Copy a build context from the artifact store (S3; AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY from the environment) to a file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if store.s3.Endpoint == "" {
				return errors.New("fetching the build context: no artifact store (the operator's --s3-endpoint is empty)")
			}
			s3, err := buildkit.NewS3Store(store.s3)
			if err != nil {
				return err
			}
			rc, err := s3.Get(cmd.Context(), key)
			if err != nil {
				return fmt.Errorf("fetching %s: %w", key, err)
			}
			defer rc.Close()
			f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				return err
			}
			n, err := io.Copy(f, rc)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("fetching %s: %w", key, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "fetched %s (%d bytes)\n", key, n)
			return nil
		},
	}
	fs := cmd.Flags()
	store.bind(fs, "")
	fs.StringVar(&key, "key", "", "object key of the build context")
	fs.StringVar(&out, "out", "", "file to write (must not exist)")
	_ = cmd.MarkFlagRequired("key")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

func newPushStepCmd() *cobra.Command {
	var (
		dir, dest, termLog string
		insecure           []string
	)
	cmd := &cobra.Command{
		Use:   "push",
		Short: "Push the one image of an OCI layout (refusing links and special files in it) with the credentials of $DOCKER_CONFIG, and write it by digest to the termination log",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var opts []name.Option
			ref, err := name.NewTag(dest, name.StrictValidation)
			if err == nil && slices.Contains(insecure, ref.RegistryStr()) {
				opts = append(opts, name.Insecure)
				ref, err = name.NewTag(dest, append(opts, name.StrictValidation)...)
			}
			if err != nil {
				return fmt.Errorf("--destination %q: %w", dest, err)
			}
			pushed, err := buildkit.PushLayout(cmd.Context(), dir, ref, remote.WithAuthFromKeychain(authn.DefaultKeychain))
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pushed %s\n", pushed)
			if termLog == "" {
				return nil
			}
			return os.WriteFile(termLog, []byte(pushed.String()), 0o644)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&dir, "layout", "", "directory of the OCI layout kaniko wrote")
	fs.StringVar(&dest, "destination", "", "image reference to push to (a tag)")
	fs.StringSliceVar(&insecure, "insecure-registry", nil, "registry host[:port] to push to over plain HTTP (repeatable)")
	fs.StringVar(&termLog, "termination-log", corev1.TerminationMessagePathDefault, "file the pushed image's reference by digest is written to (empty: none)")
	_ = cmd.MarkFlagRequired("layout")
	_ = cmd.MarkFlagRequired("destination")
	return cmd
}
