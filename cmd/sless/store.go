package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"sless.dev/sless/buildkit"
)

// storeFlags select the artifact store, shared by every component that reads or writes
// uploads: S3 when an endpoint is given, otherwise a local directory.
type storeFlags struct {
	s3 buildkit.S3Config
	// dir is the filesystem store used without S3 (sless dev).
	dir string
}

func (f *storeFlags) bind(fs *pflag.FlagSet, defaultDir string) {
	fs.StringVar(&f.s3.Endpoint, "s3-endpoint", os.Getenv("SLESS_S3_ENDPOINT"), "S3 endpoint for artifacts, http(s)://host:port (env SLESS_S3_ENDPOINT); empty: local directory")
	fs.StringVar(&f.s3.Bucket, "s3-bucket", envOr("SLESS_S3_BUCKET", "sless"), "S3 bucket for artifacts (env SLESS_S3_BUCKET)")
	fs.StringVar(&f.s3.Region, "s3-region", envOr("SLESS_S3_REGION", "us-east-1"), "S3 region (env SLESS_S3_REGION)")
	fs.StringVar(&f.dir, "artifacts-dir", defaultDir, "directory for artifacts when no S3 endpoint is given")
	// Credentials come from the environment only, never from flags (they would show in ps).
	f.s3.AccessKey, f.s3.SecretKey = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
}

// open returns the artifact store, creating the bucket or directory when missing.
func (f *storeFlags) open(ctx context.Context) (buildkit.Artifacts, error) {
	var store buildkit.Store
	var err error
	if f.s3.Endpoint != "" {
		store, err = buildkit.NewS3Store(f.s3)
	} else {
		store, err = buildkit.NewFSStore(f.dir)
	}
	if err != nil {
		return buildkit.Artifacts{}, err
	}
	if err := store.EnsureBucket(ctx); err != nil {
		return buildkit.Artifacts{}, fmt.Errorf("artifact store: %w", err)
	}
	return buildkit.Artifacts{Store: store}, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
