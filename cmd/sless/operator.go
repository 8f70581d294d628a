package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"

	"github.com/go-logr/logr"
	httpv1alpha1 "github.com/kedacore/http-add-on/operator/apis/http/v1alpha1"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"sless.dev/sless/apis/scheme"
	"sless.dev/sless/gateway/cluster"
	"sless.dev/sless/reconcilers"
	"sless.dev/sless/rules"
	"sless.dev/sless/scaling"
)

func init() { subcommands = append(subcommands, newOperatorCmd) }

func newOperatorCmd() *cobra.Command {
	var (
		opts                           = scaling.DefaultOptions()
		workers                        int
		skipTagResolution              []string
		allowedRegistries              []string
		store                          storeFlags
		metricsAddr, probeAddr         string
		metricsSecure, leaderElect     bool
		leaderElectionNamespace, level string
		databaseURL                    string
		egressAllow                    []string
		buildEgress                    []string
	)
	cmd := &cobra.Command{
		Use:   "operator",
		Short: "Run the controllers that turn Functions, Triggers and FunctionJobs into KEDA and Kubernetes objects",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := newLogger(cmd, level)
			if err != nil {
				return err
			}
			opts.Build.Egress = nil
			for _, e := range buildEgress {
				be, err := scaling.ParseBuildEgress(e)
				if err != nil {
					return fmt.Errorf("--build-egress: %w", err)
				}
				opts.Build.Egress = append(opts.Build.Egress, be)
			}
			log.SetLogger(logr.FromSlogHandler(logger.Handler()))
			cfg, err := ctrl.GetConfig()
			if err != nil {
				return fmt.Errorf("kubernetes configuration: %w", err)
			}
			s, err := scheme.New()
			if err != nil {
				return err
			}
			c, err := client.New(cfg, client.Options{Scheme: s})
			if err != nil {
				return err
			}
			if opts.SlessImage == "" {
				if opts.SlessImage, err = ownImage(cmd.Context(), c); err != nil {
					return err
				}
			}
			if opts.IdentityMaster, err = cluster.IdentityMaster(cmd.Context(), c, opts.Build.Namespace, opts.IdentitySecret); err != nil {
				return err
			}
			for _, a := range egressAllow {
				r, err := scaling.ParseEgressRule(a)
				if err != nil {
					return fmt.Errorf("--function-egress-allow %w", err)
				}
				opts.Network.EgressAllow = append(opts.Network.EgressAllow, r)
			}
			if opts.Network.Enabled {
				if opts.Network.APIServer, err = apiServerAddresses(cmd.Context(), c); err != nil {
					logger.Warn("Warning: the API server's addresses could not be read; a public one is not taken out of what functions may reach", "error", err)
				}
			}
			if err := opts.Validate(); err != nil {
				return err
			}
			// Cache only what sless manages: the operator's memory stays flat however many
			// unrelated Deployments, Services or Jobs the cluster runs.
			managed := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{scaling.LabelManagedBy: "sless"})}
			metrics, err := metricsOptions(metricsAddr, metricsSecure)
			if err != nil {
				return err
			}
			mgr, err := ctrl.NewManager(cfg, ctrl.Options{
				Scheme:                  s,
				Metrics:                 metrics,
				HealthProbeBindAddress:  probeAddr,
				LeaderElection:          leaderElect,
				LeaderElectionID:        "sless-operator.sless.dev",
				LeaderElectionNamespace: leaderElectionNamespace,
				Controller:              reconcilers.ControllerConfig(),
				Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
					&appsv1.Deployment{}: managed, &corev1.Service{}: managed, &batchv1.Job{}: managed,
					&batchv1.CronJob{}: managed, &httpv1alpha1.HTTPScaledObject{}: managed,
					&kedav1alpha1.ScaledJob{}: managed, &kedav1alpha1.TriggerAuthentication{}: managed,
					// The add-on copies the HTTPScaledObject's labels onto the ScaledObject it generates.
					&kedav1alpha1.ScaledObject{}: managed,
					// Function and build pods carry the labels of their templates.
					&corev1.Pod{}: managed,
					// The build pods' NetworkPolicy.
					&networkingv1.NetworkPolicy{}: managed,
					// The identities through which dispatchers read a function's secrets.
					&corev1.ServiceAccount{}: managed, &rbacv1.Role{}: managed, &rbacv1.RoleBinding{}: managed,
					// The secrets API's Secrets (labelled as sless's too) and the functions'
					// identity Secrets: functions reference no other.
					&corev1.Secret{}: managed, &networkingv1.NetworkPolicy{}: managed,
				}},
			})
			if err != nil {
				return fmt.Errorf("creating the manager: %w", err)
			}
			if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
				return err
			}
			if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
				return err
			}
			artifacts, err := store.open(cmd.Context())
			if err != nil {
				return err
			}
			rc := reconcilers.Config{Options: opts, Artifacts: artifacts, Workers: workers,
				SkipTagResolution: skipTagResolution, AllowedRegistries: allowedRegistries}
			if databaseURL != "" {
				hist, err := openHistory(cmd.Context(), databaseURL, logger)
				if err != nil {
					return err
				}
				defer func() { _ = hist.Close(context.Background()) }()
				rc.History = hist
			}
			if err := reconcilers.Setup(cmd.Context(), mgr, rc); err != nil {
				return err
			}
			logger.Info("operator starting", "version", version, "leaderElection", leaderElect)
			return mgr.Start(cmd.Context())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&metricsAddr, "metrics-bind-address", ":8443", "address of the Prometheus metrics endpoint (0 disables it)")
	fs.BoolVar(&metricsSecure, "metrics-secure", true, "serve metrics over HTTPS, only to callers whose Kubernetes token may get the non-resource URL /metrics (TokenReview, SubjectAccessReview; the chart's ClusterRole sless-metrics-reader); false: plain HTTP, on a loopback --metrics-bind-address only")
	fs.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	fs.BoolVar(&leaderElect, "leader-elect", true, "elect one active operator among replicas")
	fs.StringVar(&leaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader lease (default: the pod's)")
	fs.StringVar(&level, "log-level", "info", "debug, info, warn or error")
	fs.IntVar(&workers, "workers", 4, "objects of one kind reconciled at once")
	fs.StringVar(&opts.Domain, "domain", opts.Domain, "routing hosts are <name>.<namespace>.<domain>")
	fs.StringVar(&opts.GatewayURL, "gateway-url", opts.GatewayURL, "external base URL of the gateway, for function URLs")
	fs.StringVar(&opts.InterceptorURL, "interceptor-url", opts.InterceptorURL, "KEDA HTTP interceptor proxy that dispatcher jobs invoke through")
	fs.StringVar(&opts.SlessImage, "sless-image", opts.SlessImage, "image of this binary, run by ScaledJobs and CronJobs (default: the image of the operator's own pod, POD_NAME/POD_NAMESPACE)")
	fs.StringVar(&opts.AsyncSecret, "async-secret", os.Getenv("SLESS_ASYNC_SECRET"), "Secret in the build namespace with SLESS_AMQP_URL and SLESS_DATABASE_URL: functions with async enabled get a dispatcher ScaledJob there (env SLESS_ASYNC_SECRET); empty: no asynchronous invocations")
	fs.StringVar(&databaseURL, "database-url", os.Getenv("SLESS_DATABASE_URL"), "PostgreSQL URL of the invocation history health-gated rollouts are judged by (env SLESS_DATABASE_URL); empty: rollouts hold at their step")
	fs.StringVar(&opts.HistorySecret, "history-secret", opts.HistorySecret, "Secret (key url) in tenant namespaces with the PostgreSQL URL dispatcher pods record to")
	fs.DurationVar(&opts.ColdStartTimeout, "cold-start-timeout", opts.ColdStartTimeout, "how long the interceptor holds a request for a function at zero (at most "+rules.MaxColdStartHold.String()+": a signed call held longer reaches the function expired)")
	fs.StringVar(&opts.IdentitySecret, "identity-secret", opts.IdentitySecret, "Secret in the build namespace with the master key every function's key is derived from (made at the first start; the gateway reads the same)")
	fs.BoolVar(&opts.Network.Enabled, "network-policies", opts.Network.Enabled, "render NetworkPolicies in tenant namespaces: function pods take connections from the interceptor only, function and job pods reach DNS, public addresses and --function-egress-allow only")
	fs.StringVar(&opts.Network.InterceptorNamespace, "interceptor-namespace", opts.Network.InterceptorNamespace, "namespace of the KEDA HTTP interceptor's pods, which function pods take connections from")
	fs.StringToStringVar(&opts.Network.InterceptorPods, "interceptor-pod-labels", opts.Network.InterceptorPods, "labels of the KEDA HTTP interceptor's pods (its Helm chart's; the add-on's kustomize install labels them app.kubernetes.io/instance=interceptor)")
	fs.StringSliceVar(&egressAllow, "function-egress-allow", nil, "more destinations function and job pods may reach, CIDR[:PORT[/PROTOCOL]] (e.g. 10.1.2.3/32:5432, 169.254.20.10/32:53/UDP; repeatable)")
	fs.StringVar(&opts.ImagePullSecret, "image-pull-secret", opts.ImagePullSecret, "pull Secret attached to function pods whose image is their namespace's own in --registry (<registry>/<namespace>/…)")
	fs.StringSliceVar(&allowedRegistries, "allowed-registries", reconcilers.DefaultAllowedRegistries,
		"registries (host[:port][/path]) prebuilt images (a Function's or FunctionJob's image) may come from, besides the namespace's own images in --registry (always allowed; other namespaces' there never are); their hosts are reached even on private addresses")
	fs.StringSliceVar(&skipTagResolution, "registries-skipping-tag-resolving", reconcilers.DefaultSkipTagResolution,
		"registries (host[:port]) whose prebuilt images run as given, their tags not resolved to digests: images loaded into the nodes, private registries the operator has no credentials for")
	fs.StringVar(&opts.Build.Namespace, "build-namespace", opts.Build.Namespace, "namespace build Jobs run in")
	fs.StringVar(&opts.Build.KanikoImage, "kaniko-image", opts.Build.KanikoImage, "kaniko executor image, pinned by digest (it holds no credential: base images come from the registries anonymously)")
	fs.StringSliceVar(&opts.Build.InsecureRegistries, "kaniko-insecure-registry", nil, "registry host[:port] builds push to and pull from, and prebuilt images' tags are resolved from, over plain HTTP (repeatable)")
	fs.StringSliceVar(&opts.Build.RegistryMirrors, "kaniko-registry-mirror", nil, "mirror of Docker Hub for the Dockerfiles' base images (repeatable)")
	fs.StringVar(&opts.Build.Registry, "registry", opts.Build.Registry, "registry host[:port][/path] function images are pushed to")
	fs.StringVar(&opts.Build.RegistrySecret, "registry-secret", opts.Build.RegistrySecret, "dockerconfigjson Secret in the build namespace the builds' push step pushes with (kaniko never holds it)")
	fs.StringVar(&opts.Build.S3Secret, "build-s3-secret", opts.Build.S3Secret, "Secret in the build namespace with AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY the builds' fetch step reads contexts with (kaniko never holds it)")
	var defaultEgress []string
	for _, e := range scaling.DefaultBuildEgress {
		defaultEgress = append(defaultEgress, e.String())
	}
	fs.StringArrayVar(&buildEgress, "build-egress", defaultEgress, "CIDR[:PORT[/udp],...] build pods may reach besides DNS, the registry, its mirrors and the artifact store: package registries, Docker Hub (repeatable; given, it replaces the default). Private, link-local, CGNAT and the API server's addresses are left out of every range unless one lies wholly inside them")
	fs.DurationVar(&opts.Build.Deadline, "build-timeout", opts.Build.Deadline, "longest a build may run")
	fs.IntVar(&opts.Build.MaxConcurrent, "max-concurrent-builds", 0, "build Jobs that run at once; the others wait in the operator, spending none of --build-timeout (0: no cap)")
	store.bind(fs, "/var/lib/sless/artifacts")
	cmd.PreRun = func(*cobra.Command, []string) {
		// kaniko reads contexts from the same bucket the gateway stores them in.
		opts.Build.Bucket, opts.Build.S3Endpoint, opts.Build.S3Region = store.s3.Bucket, store.s3.Endpoint, store.s3.Region
	}
	return cmd
}

// metricsOptions serves the controller-runtime metrics on addr. Every pod of the cluster
// can reach the operator's, tenants' functions included, and they name every tenant's
// objects: secure, a caller needs a Kubernetes token that may get /metrics (as kubelet's and
// kube-apiserver's endpoints do); insecure is for a loopback address only.
func metricsOptions(addr string, secure bool) (metricsserver.Options, error) {
	if secure {
		return metricsserver.Options{BindAddress: addr, SecureServing: true, FilterProvider: filters.WithAuthenticationAndAuthorization}, nil
	}
	if addr != "0" {
		host, _, err := net.SplitHostPort(addr)
		if ip, perr := netip.ParseAddr(host); err != nil || perr != nil || !ip.IsLoopback() {
			return metricsserver.Options{}, fmt.Errorf("--metrics-secure=false serves the operator's metrics to whoever reaches --metrics-bind-address %q: bind it to a loopback address (127.0.0.1:8080) or keep --metrics-secure", addr)
		}
	}
	return metricsserver.Options{BindAddress: addr}, nil
}

// apiServerAddresses are the addresses the API server's Service (default/kubernetes) sends
// to: a public one is taken out of what the tenants' code may reach.
func apiServerAddresses(ctx context.Context, c client.Reader) ([]netip.Addr, error) {
	var list discoveryv1.EndpointSliceList
	if err := c.List(ctx, &list, client.InNamespace(metav1.NamespaceDefault), client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"}); err != nil {
		return nil, fmt.Errorf("listing the API server's endpoints: %w", err)
	}
	var out []netip.Addr
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil {
					out = append(out, ip)
				}
			}
		}
	}
	return out, nil
}

// ownImage is the image of the operator's own pod (POD_NAME and POD_NAMESPACE from the
// downward API): dispatcher pods run the same binary, so an install that pins the operator by
// digest (kustomize images:, the Helm chart) pins them too.
func ownImage(ctx context.Context, c client.Reader) (string, error) {
	ns, name := os.Getenv("POD_NAMESPACE"), os.Getenv("POD_NAME")
	if ns == "" || name == "" {
		return "", errors.New("--sless-image is not set and POD_NAME/POD_NAMESPACE do not name the operator's pod: set one of them")
	}
	var pod corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pod); err != nil {
		return "", fmt.Errorf("reading the operator's pod %s/%s for its image (or set --sless-image): %w", ns, name, err)
	}
	return pod.Spec.Containers[0].Image, nil
}

// newLogger builds the JSON slog logger every long-running component uses.
func newLogger(cmd *cobra.Command, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: l})), nil
}
