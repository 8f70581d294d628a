package buildkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sort"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"go.opentelemetry.io/otel/attribute"
)

// S3Config configures an S3Store.
type S3Config struct {
	// Endpoint is host:port, or a URL whose scheme sets UseTLS (http:// or https://).
	Endpoint  string
	AccessKey string
	SecretKey string
	Bucket    string
	Region    string // default us-east-1
	UseTLS    bool
}

// S3Store keeps artifacts in one S3 bucket through minio-go.
type S3Store struct {
	client *minio.Client
	bucket string
	region string
}

var _ Store = (*S3Store)(nil)

// NewS3Store connects lazily: the first request reaches the server.
func NewS3Store(cfg S3Config) (*S3Store, error) {
	endpoint, secure := cfg.Endpoint, cfg.UseTLS
	if u, err := url.Parse(cfg.Endpoint); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
		endpoint, secure = u.Host, u.Scheme == "https"
	}
	if endpoint == "" || cfg.Bucket == "" {
		return nil, fmt.Errorf("S3 artifact store: endpoint and bucket are required (got %q, %q)", cfg.Endpoint, cfg.Bucket)
	}
	region := cfg.Region
	if region == "" {
		region = "us-east-1"
	}
	client, err := minio.New(endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure: secure,
		Region: region,
	})
	if err != nil {
		return nil, fmt.Errorf("S3 artifact store at %s: %w", endpoint, err)
	}
	return &S3Store{client: client, bucket: cfg.Bucket, region: region}, nil
}

// EnsureBucket creates the bucket unless it exists.
func (s *S3Store) EnsureBucket(ctx context.Context) error {
	ctx, span := tracer.Start(ctx, "buildkit.S3Store.EnsureBucket")
	defer span.End()
	exists, err := s.client.BucketExists(ctx, s.bucket)
	if err == nil && !exists {
		err = s.client.MakeBucket(ctx, s.bucket, minio.MakeBucketOptions{Region: s.region})
		if code := minio.ToErrorResponse(err).Code; code == minio.BucketAlreadyOwnedByYou || code == minio.BucketAlreadyExists {
			err = nil // created concurrently
		}
	}
	if err != nil {
		recordError(span, err)
		return fmt.Errorf("ensuring S3 bucket %s: %w", s.bucket, err)
	}
	return nil
}

// Put uploads one object.
func (s *S3Store) Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) error {
	ctx, span := tracer.Start(ctx, "buildkit.S3Store.Put")
	defer span.End()
	span.SetAttributes(attribute.String("sless.key", key), attribute.Int64("sless.bytes", size))
	if err := checkKey(key); err != nil {
		return err
	}
	if _, err := s.client.PutObject(ctx, s.bucket, key, r, size, minio.PutObjectOptions{ContentType: contentType}); err != nil {
		recordError(span, err)
		return fmt.Errorf("storing s3://%s/%s: %w", s.bucket, key, err)
	}
	return nil
}

// Get opens one object; a missing key gives ErrNotFound.
func (s *S3Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	ctx, span := tracer.Start(ctx, "buildkit.S3Store.Get")
	defer span.End()
	span.SetAttributes(attribute.String("sless.key", key))
	if err := checkKey(key); err != nil {
		return nil, err
	}
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err == nil {
		_, err = obj.Stat() // GetObject is lazy: surface a missing key here
	}
	if err != nil {
		recordError(span, err)
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			err = errors.Join(ErrNotFound, err)
		}
		return nil, fmt.Errorf("getting s3://%s/%s: %w", s.bucket, key, err)
	}
	return obj, nil
}

// List lists the objects under prefix.
func (s *S3Store) List(ctx context.Context, prefix string) ([]Object, error) {
	ctx, span := tracer.Start(ctx, "buildkit.S3Store.List")
	defer span.End()
	var out []Object
	for info := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if info.Err != nil {
			recordError(span, info.Err)
			return nil, fmt.Errorf("listing s3://%s/%s: %w", s.bucket, prefix, info.Err)
		}
		out = append(out, Object{Key: info.Key, Size: info.Size, LastModified: info.LastModified})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// DeletePrefix removes every object under prefix with batched multi-object deletes.
func (s *S3Store) DeletePrefix(ctx context.Context, prefix string) (int, error) {
	ctx, span := tracer.Start(ctx, "buildkit.S3Store.DeletePrefix")
	defer span.End()
	span.SetAttributes(attribute.String("sless.prefix", prefix))
	objects, err := s.List(ctx, prefix)
	if err != nil {
		return 0, err
	}
	ch := make(chan minio.ObjectInfo, len(objects))
	for _, o := range objects {
		ch <- minio.ObjectInfo{Key: o.Key}
	}
	close(ch)
	var errs []error
	for rerr := range s.client.RemoveObjects(ctx, s.bucket, ch, minio.RemoveObjectsOptions{}) {
		errs = append(errs, fmt.Errorf("deleting s3://%s/%s: %w", s.bucket, rerr.ObjectName, rerr.Err))
	}
	if err := errors.Join(errs...); err != nil {
		recordError(span, err)
		return len(objects) - len(errs), err
	}
	return len(objects), nil
}
