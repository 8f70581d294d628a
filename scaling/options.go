package scaling

import (
	"errors"
	"fmt"
	"time"

	"sless.dev/sless/rules"
)

// Options is the cluster-wide configuration the renderers need beyond the objects themselves.
type Options struct {
	// Domain suffixes routing hosts: <name>.<namespace>.<Domain>.
	Domain string
	// GatewayURL is the external base URL of the gateway; function URLs hang off it.
	GatewayURL string
	// InterceptorURL is the KEDA HTTP interceptor's proxy service, which dispatcher jobs and
	// cron firings invoke through so KEDA also handles their cold starts.
	InterceptorURL string
	// SlessImage runs `sless dispatcher` in ScaledJob and CronJob pods: the operator's own
	// image, found from its pod when not given.
	SlessImage string
	// HistorySecret, when set, names a Secret (key "url") in the function's namespace with the
	// PostgreSQL URL dispatcher pods record invocations to; optional in the pod.
	HistorySecret string
	// ColdStartTimeout bounds how long the interceptor holds a request for a function at zero.
	ColdStartTimeout time.Duration
	// AsyncSecret, when set, names a Secret in Build.Namespace (the platform's) with the
	// keys SLESS_AMQP_URL and SLESS_DATABASE_URL: the broker the gateway queues asynchronous
	// invocations on and the database of their records. Functions with async enabled get a
	// dispatcher ScaledJob there; without it they take no asynchronous invocations.
	AsyncSecret string
	// ImagePullSecret, when set, is attached to the function pods whose image is their
	// namespace's own in Build.Registry (<registry>/<namespace>/…).
	ImagePullSecret string
	// IdentityMaster is the platform's master key (rules.IdentityMasterBytes): each
	// function's key is derived from it (MakeIdentitySecret). Its fingerprint is on every
	// function's pod template. Never rendered itself.
	IdentityMaster []byte
	// IdentitySecret names the Secret in Build.Namespace holding the master (key
	// IdentityMasterField, hex), which the asynchronous dispatchers there read.
	IdentitySecret string
	// Network is what the tenants' NetworkPolicies admit (MakeTenantNetworkPolicies).
	Network NetworkOptions

	Build BuildOptions
}

// BuildOptions configures image builds (MakeBuildJob). Build Jobs run in Namespace (the
// platform's own), so tenants never see the registry or S3 credentials, and inside a build
// pod only the fetch and push steps hold them.
type BuildOptions struct {
	Namespace string
	// KanikoImage is the executor image, pinned by digest (DefaultKanikoImage).
	KanikoImage string
	// Registry is host[:port][/path]; images go to <Registry>/<namespace>/<name>:sha-<hash>.
	Registry string
	// InsecureRegistries are registries builds talk plain HTTP to (kaniko's pulls, the push).
	InsecureRegistries []string
	// RegistryMirrors serve the Dockerfiles' Docker Hub base images (kaniko --registry-mirror).
	RegistryMirrors []string
	// RegistrySecret is a kubernetes.io/dockerconfigjson Secret in Namespace the push step
	// pushes with.
	RegistrySecret string
	// Bucket, S3Endpoint and S3Region locate the build contexts; S3Secret holds
	// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, which the fetch step reads them with.
	Bucket     string
	S3Endpoint string
	S3Region   string
	S3Secret   string
	// Deadline bounds one build (activeDeadlineSeconds).
	Deadline time.Duration
	// MaxConcurrent caps the build Jobs that run at once; the others wait in the operator
	// without spending Deadline. 0: no cap.
	MaxConcurrent int
	// MemoryMB is the memory limit of the kaniko container.
	MemoryMB int32
	// Egress are the address ranges build pods may reach besides DNS, the registry, its
	// mirrors and the artifact store (MakeBuildNetworkPolicy); DefaultBuildEgress: every
	// public address.
	Egress []BuildEgress
}

// DefaultKanikoImage is kaniko's last upstream release, pinned by the digest of its
// multi-platform index. Upstream is archived; the maintained fork (chainguard-dev/kaniko)
// publishes no free image, so a cluster that builds its own sets --kaniko-image
// (docs/install.md).
const DefaultKanikoImage = "gcr.io/kaniko-project/executor:v1.24.0@sha256:4e7a52dd1f14872430652bb3b027405b8dfd17c4538751c620ac005741ef9698"

// DefaultOptions are the values `sless operator` starts from; flags override them.
func DefaultOptions() Options {
	return Options{
		Domain:           rules.DefaultDomain,
		GatewayURL:       "http://sless-gateway.sless-system:8080",
		InterceptorURL:   "http://keda-add-ons-http-interceptor-proxy.keda:8080",
		ColdStartTimeout: 2 * time.Minute,
		IdentitySecret:   "sless-identity",
		Network:          DefaultNetworkOptions(),
		Build: BuildOptions{
			Namespace:   "sless-system",
			KanikoImage: DefaultKanikoImage,
			Registry:    "registry.sless-system:5000",
			Bucket:      "sless",
			S3Region:    "us-east-1",
			S3Secret:    "sless-s3",
			Deadline:    15 * time.Minute,
			MemoryMB:    2048,
			Egress:      DefaultBuildEgress,
		},
	}
}

// Validate reports options that would render broken objects.
func (o Options) Validate() error {
	for name, v := range map[string]string{
		"domain": o.Domain, "gateway URL": o.GatewayURL, "interceptor URL": o.InterceptorURL,
		"sless image": o.SlessImage, "build namespace": o.Build.Namespace, "kaniko image": o.Build.KanikoImage,
		"registry": o.Build.Registry, "bucket": o.Build.Bucket,
	} {
		if v == "" {
			return fmt.Errorf("scaling options: %s is required", name)
		}
	}
	if len(o.IdentityMaster) != rules.IdentityMasterBytes {
		return fmt.Errorf("scaling options: the identity master key must be %d bytes, got %d", rules.IdentityMasterBytes, len(o.IdentityMaster))
	}
	if o.IdentitySecret == "" {
		return errors.New("scaling options: identity secret is required")
	}
	if o.ColdStartTimeout > rules.MaxColdStartHold {
		return fmt.Errorf("scaling options: cold start timeout %s is above %s: a call held that long would reach the function with an expired signature", o.ColdStartTimeout, rules.MaxColdStartHold)
	}
	if err := o.Network.validate(); err != nil {
		return err
	}
	if o.Build.MaxConcurrent < 0 {
		return fmt.Errorf("scaling options: max concurrent builds must be 0 (no cap) or more, got %d", o.Build.MaxConcurrent)
	}
	if o.Build.Deadline <= 0 {
		return fmt.Errorf("scaling options: build deadline must be positive, got %s", o.Build.Deadline)
	}
	return nil
}
