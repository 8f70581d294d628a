//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"sless.dev/sless/apis/scheme"
	"sless.dev/sless/test/images"
	"sless.dev/sless/test/testenv"
)

// functionsDomain serves each function on a host of its own at the gateway (a gRPC client
// names its function by the host, as it has no path of its own to prefix).
const functionsDomain = "fn.sless.test"

// buildTimeout is the operator's --build-timeout on the ground, and what a wait for a build's
// outcome allows from when the build may start: a Go function's kaniko build compiles its
// wrapper from nothing, which took over 5 minutes beside a cold make test on 2 cores.
const buildTimeout = 10 * time.Minute

// Fixed ports inside the private namespace. The add-on binds 0.0.0.0, so none of them may
// be a port functions use (buildkit.DefaultPort), and the interceptor's admin and the
// scaler's gRPC ports (both 9090 by default) are set apart.
const (
	interceptorProxyPort = 19080
	// Service ports of the add-on's Services, as in its Helm chart.
	interceptorProxySvcPort = 8080
	interceptorAdminSvcPort = 9090
	scalerSvcPort           = 9090
	interceptorAdminPort    = 19090
	scalerPort              = 19091
	kedaMetricsPort         = 19100
	kedaProbePort           = 19101
	kedaMetricsSvcPort      = 19102
	addonMetricsPort        = 19103
	addonProbePort          = 19104
	slessProbePort          = 19105
	kcmPort                 = 19110
	schedulerPort           = 19111
	s3Port                  = 19200
	apiServerPort           = 16443

	// The registry every image comes from: base-image stand-ins, kaniko, the platform image
	// and the function images kaniko builds. Its name resolves through the hosts file.
	registryIP   = "10.244.0.2"
	registryName = "registry.e2e"
	registry     = registryName + ":5000"
	bucket       = "sless"
	s3Key        = "sless-e2e"
	s3Secret     = "sless-e2e-secret"
	// The registry takes pushes only with this account (as docs/install.md requires): the
	// builds' push step has it from the registry-push Secret, the ground's own pushes from
	// g.reg.Auth() and g.dockerConfig; pulls are anonymous.
	registryUser     = "sless-e2e-builds"
	registryPassword = "e2e-registry-push-0123456789abcdef"
	hmacKey          = "e2e-signing-key-0123456789abcdef0123456789abcdef"
)

// ground is the running test ground.
type ground struct {
	dir        string
	tools      map[string]string
	log        *slog.Logger
	env        *envtest.Environment
	cfg        *rest.Config
	kubeconfig string
	client     client.Client
	cs         kubernetes.Interface
	hosts      *hostsFile
	marks      *timeline
	dbURL      string
	gatewayURL string
	reg        *images.Registry
	// dockerConfig is a directory holding a config.json with the registry's push account.
	dockerConfig string
	standIns     map[string]v1.Hash // stand-in name (library/python:3.11...) → digest
	// platformImage and kanikoImage are references by digest in the registry.
	platformImage, kanikoImage string
	procs                      []*component
	kubelets                   []*kubelet
	stops                      []func()
}

// component is a platform process (KEDA, the add-on, kube-controller-manager, ...).
type component struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

func (g *ground) spawn(name string, env []string, argv ...string) error {
	logf, err := os.Create(filepath.Join(g.dir, "logs", name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "KUBECONFIG=" + g.kubeconfig}, env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	c := &component{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(c.done) }()
	g.procs = append(g.procs, c)
	return nil
}

// stopComponents ends the platform processes newest first.
func (g *ground) stopComponents() {
	for i := len(g.procs) - 1; i >= 0; i-- {
		c := g.procs[i]
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			<-c.done
		}
	}
}

// exited reports a component that died: the ground is then broken and its log says why.
func (g *ground) exited() error {
	for _, c := range g.procs {
		select {
		case <-c.done:
			return fmt.Errorf("%s exited (%s); see %s", c.name, c.cmd.ProcessState, filepath.Join(g.dir, "logs", c.name+".log"))
		default:
		}
	}
	return nil
}

// startGround brings everything up; stop tears it down in reverse.
func startGround(ctx context.Context, tools map[string]string, log *slog.Logger) (*ground, error) {
	dir, err := os.MkdirTemp("", "sless-e2e-")
	if err != nil {
		return nil, err
	}
	g := &ground{dir: dir, tools: tools, log: log, marks: newTimeline()}
	for _, d := range []string{"logs", "pods", "runtime", "keda-certs", "s3"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return g, err
		}
	}
	g.hosts = &hostsFile{path: filepath.Join(dir, "hosts"), names: map[string]string{}}
	if err := enterNamespace(ctx, g.hosts.path); err != nil {
		return g, err
	}
	if err := addAddress(registryIP); err != nil {
		return g, err
	}
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"registry and images", g.startRegistry},
		{"control plane", g.startControlPlane},
		{"kubelets and services", g.startNodes},
		{"kube-scheduler", g.startScheduler},
		{"kube-controller-manager", g.startControllerManager},
		{"KEDA and the HTTP add-on", g.startKEDA},
		{"KEDA's metrics API server (external metrics for the HPA)", g.startMetricsAdapter},
		{"S3 and PostgreSQL", g.startStorage},
		{"sless by its Helm chart (operator, gateway)", g.installSless},
		{"the platform Dockerfile's kaniko build started", g.startPlatformBuild},
	}
	for _, s := range steps {
		start := time.Now()
		if err := s.fn(ctx); err != nil {
			return g, fmt.Errorf("starting %s: %w", s.name, err)
		}
		log.Info("ground step ready", "step", s.name, "took", time.Since(start).Round(time.Millisecond))
	}
	return g, nil
}

func (g *ground) stop() {
	for _, k := range g.kubelets {
		k.stopAll()
	}
	for i := len(g.stops) - 1; i >= 0; i-- {
		g.stops[i]()
	}
	g.stopComponents()
	if g.env != nil {
		if err := g.env.Stop(); err != nil {
			g.log.Warn("stopping the control plane", "err", err)
		}
	}
	if os.Getenv("SLESS_E2E_KEEP") == "" {
		_ = os.RemoveAll(g.dir)
	} else {
		g.log.Info("kept the ground's files", "dir", g.dir)
	}
}

func (g *ground) startControlPlane(ctx context.Context) error {
	crds, err := testenv.CRDPaths()
	if err != nil {
		return err
	}
	// The KEDA operator also watches its eventing CRDs, which sless itself does not use.
	for _, p := range crds {
		if strings.HasPrefix(filepath.Base(p), "keda.sh_") {
			more, _ := filepath.Glob(filepath.Join(filepath.Dir(p), "eventing.keda.sh_*.yaml"))
			crds = append(crds, more...)
			break
		}
	}
	g.env = &envtest.Environment{BinaryAssetsDirectory: g.tools["envtest"], CRDDirectoryPaths: crds, ErrorIfCRDPathMissing: true,
		ControlPlaneStopTimeout: time.Minute} // the API server drains for a while after SIGTERM
	api := g.env.ControlPlane.GetAPIServer()
	// Pods reach the API server from their own network namespaces, at the node's address.
	api.SecureServing.ListenAddr = envtest.ListenAddr{Address: nodeIP, Port: strconv.Itoa(apiServerPort)}
	// The namespace has no default route to take an advertise address from, and 1.37
	// refuses loopback with the default endpoint reconciler.
	api.Configure().Set("advertise-address", nodeIP).Set("endpoint-reconciler-type", "none").
		// pods/log goes to the kubelet at the node's address (its name does not resolve).
		Set("kubelet-preferred-address-types", "InternalIP").
		// envtest's /24 holds 254 Services, a Function each: the benchmark's 1,000 need more.
		Set("service-cluster-ip-range", "10.96.0.0/16")
	if err := g.configureAggregation(api); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(g.dir, "logs", "kube-apiserver.log"))
	if err != nil {
		return err
	}
	api.Out, api.Err = logf, logf
	if _, err := g.env.Start(); err != nil {
		return err
	}
	user, err := g.env.AddUser(envtest.User{Name: "e2e-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	g.cfg = user.Config()
	kc, err := user.KubeConfig()
	if err != nil {
		return err
	}
	g.kubeconfig = filepath.Join(g.dir, "kubeconfig")
	if err := os.WriteFile(g.kubeconfig, kc, 0o600); err != nil {
		return err
	}
	s, err := scheme.New()
	if err != nil {
		return err
	}
	if g.client, err = client.New(g.cfg, client.Options{Scheme: s}); err != nil {
		return err
	}
	if g.cs, err = kubernetes.NewForConfig(g.cfg); err != nil {
		return err
	}
	for _, ns := range []string{"keda", "sless-system"} {
		if err := g.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

func (g *ground) startNodes(ctx context.Context) error {
	if _, err := startServices(ctx, g.cs, g.hosts, g.log); err != nil {
		return err
	}
	resolv := filepath.Join(g.dir, "resolv.conf")
	// No cluster DNS: names come from the hosts file, and a lookup past it fails at once.
	if err := os.WriteFile(resolv, []byte("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"), 0o644); err != nil {
		return err
	}
	env := nodeEnv{hosts: g.hosts, resolvConf: resolv, apiHost: nodeIP, apiPort: strconv.Itoa(apiServerPort), apiCA: g.cfg.CAData}
	rt := newRuntime(filepath.Join(g.dir, "runtime"))
	for i := range nodeCount {
		k := newKubelet(g.cs, i, filepath.Join(g.dir, "pods"), rt, env, g.marks, g.log)
		g.kubelets = append(g.kubelets, k)
		if err := k.start(ctx); err != nil {
			return fmt.Errorf("node %s: %w", k.node, err)
		}
	}
	return nil
}

// startScheduler runs the real kube-scheduler: it binds every pod (its default profile spreads
// a Deployment's pods over the nodes), so the kubelets only run what is bound to their node.
func (g *ground) startScheduler(ctx context.Context) error {
	err := g.spawn("kube-scheduler", nil, filepath.Join(g.tools["envtest"], "kube-scheduler"),
		"--kubeconfig="+g.kubeconfig, "--authentication-kubeconfig="+g.kubeconfig, "--authorization-kubeconfig="+g.kubeconfig,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(schedulerPort))
	if err != nil {
		return err
	}
	return g.waitHealthy(ctx, "https://127.0.0.1:"+strconv.Itoa(schedulerPort)+"/healthz", 60*time.Second)
}

func (g *ground) startControllerManager(ctx context.Context) error {
	err := g.spawn("kube-controller-manager", nil, filepath.Join(g.tools["envtest"], "kube-controller-manager"),
		"--kubeconfig="+g.kubeconfig, "--authentication-kubeconfig="+g.kubeconfig, "--authorization-kubeconfig="+g.kubeconfig,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(kcmPort),
		// No node heartbeats from the stand-in kubelet, no service-account keys, no cloud.
		"--controllers=*,-node-lifecycle-controller,-serviceaccount-token-controller",
		"--concurrent-deployment-syncs=10", "--concurrent-replicaset-syncs=10",
		// The HPA controller's sync period (15 s) and scale-down stabilization (5 min) made
		// short for the scale-out journey; the path (HPA → external metrics → KEDA) is the same.
		"--horizontal-pod-autoscaler-sync-period=2s", "--horizontal-pod-autoscaler-downscale-stabilization=10s")
	if err != nil {
		return err
	}
	return g.waitHealthy(ctx, "https://127.0.0.1:"+strconv.Itoa(kcmPort)+"/healthz", 60*time.Second)
}

// platformService makes name.keda resolve and route to a platform process listening on
// target on every address (as the add-on does), through a selector-less Service and its
// slice. The Service port differs from target: a listener on the Service address cannot
// share a port with a wildcard listener.
func (g *ground) platformService(ctx context.Context, name string, port, target int32) error {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "keda"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "main", Port: port, TargetPort: intstr.FromInt32(target)}}}}
	if err := g.client.Create(ctx, svc); err != nil {
		return err
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "keda", Labels: map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "sless-e2e"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{nodeIP}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("main"), Port: ptr.To(target)}},
	}
	return g.client.Create(ctx, slice)
}

func (g *ground) startKEDA(ctx context.Context) error {
	for name, ports := range map[string][2]int32{
		"keda-add-ons-http-interceptor-proxy": {interceptorProxySvcPort, interceptorProxyPort},
		"keda-add-ons-http-interceptor-admin": {interceptorAdminSvcPort, interceptorAdminPort},
		"keda-add-ons-http-external-scaler":   {scalerSvcPort, scalerPort},
	} {
		if err := g.platformService(ctx, name, ports[0], ports[1]); err != nil {
			return err
		}
	}
	certs := filepath.Join(g.dir, "keda-certs")
	// KEDA's gRPC metrics service loads these even with certificate rotation off.
	if err := writeCertDir(certs, "keda-operator", []string{"keda-operator", "keda-operator.keda", "keda-operator.keda.svc", "localhost"},
		[]net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		return err
	}
	bin := func(n string) string { return filepath.Join(g.tools["keda"], n) }
	local := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	noOTel := "OTEL_PROM_EXPORTER_ENABLED=false"
	if err := g.spawn("keda-operator", []string{"POD_NAMESPACE=keda", "KEDA_CLUSTER_OBJECT_NAMESPACE=keda", "WATCH_NAMESPACE="},
		bin("keda-operator"), "--leader-elect=false", "--enable-cert-rotation=false", "--cert-dir="+certs, "--ca-dir="+certs,
		"--metrics-bind-address="+local(kedaMetricsPort), "--health-probe-bind-address="+local(kedaProbePort),
		"--metrics-service-bind-address="+local(kedaMetricsSvcPort), "--enable-webhook-patching=false", "--enable-apiservice-patching=false",
		"--zap-log-level=info"); err != nil {
		return err
	}
	if err := g.spawn("http-add-on-operator", []string{"KEDA_HTTP_OPERATOR_NAMESPACE=keda", "KEDA_HTTP_OPERATOR_WATCH_NAMESPACE=",
		"KEDA_HTTP_OPERATOR_EXTERNAL_SCALER_SERVICE=keda-add-ons-http-external-scaler", "KEDA_HTTP_OPERATOR_EXTERNAL_SCALER_PORT=" + strconv.Itoa(scalerSvcPort)},
		bin("http-operator"), "--leader-elect=false", "--metrics-bind-address="+local(addonMetricsPort), "--health-probe-bind-address="+local(addonProbePort)); err != nil {
		return err
	}
	if err := g.spawn("http-add-on-scaler", []string{noOTel, "KEDA_HTTP_SCALER_PORT=" + strconv.Itoa(scalerPort),
		"KEDA_HTTP_SCALER_TARGET_ADMIN_NAMESPACE=keda", "KEDA_HTTP_SCALER_TARGET_ADMIN_SERVICE=keda-add-ons-http-interceptor-admin",
		"KEDA_HTTP_SCALER_TARGET_ADMIN_DEPLOYMENT=keda-add-ons-http-interceptor", "KEDA_HTTP_SCALER_TARGET_ADMIN_PORT=" + strconv.Itoa(interceptorAdminPort)},
		bin("scaler")); err != nil {
		return err
	}
	if err := g.spawn("http-add-on-interceptor", []string{noOTel, "KEDA_HTTP_PROXY_PORT=" + strconv.Itoa(interceptorProxyPort),
		"KEDA_HTTP_ADMIN_PORT=" + strconv.Itoa(interceptorAdminPort), "KEDA_HTTP_READINESS_TIMEOUT=120s",
		"KEDA_HTTP_SHUTDOWN_DELAY=0s", "KEDA_HTTP_DRAIN_TIMEOUT=2s", "KEDA_HTTP_WATCH_NAMESPACE="},
		bin("interceptor")); err != nil {
		return err
	}
	for _, u := range []string{"http://" + local(kedaProbePort) + "/readyz", "http://" + local(addonProbePort) + "/readyz"} {
		if err := g.waitHealthy(ctx, u, 60*time.Second); err != nil {
			return err
		}
	}
	for _, p := range []int{interceptorProxyPort, interceptorAdminPort, scalerPort} {
		if err := g.waitTCP(ctx, local(p), 60*time.Second); err != nil {
			return err
		}
	}
	return nil
}

func (g *ground) startStorage(ctx context.Context) error {
	addr := nodeIP + ":" + strconv.Itoa(s3Port)
	err := g.spawn("versitygw", []string{"ROOT_ACCESS_KEY_ID=" + s3Key, "ROOT_SECRET_ACCESS_KEY=" + s3Secret, "VGW_REGION=us-east-1"},
		g.tools["versitygw"], "--port", addr, "--quiet", "posix", filepath.Join(g.dir, "s3"))
	if err != nil {
		return err
	}
	if err := g.waitTCP(ctx, addr, 30*time.Second); err != nil {
		return err
	}
	g.dbURL, err = newDatabase(ctx)
	if err != nil {
		return err
	}
	g.stops = append(g.stops, func() { dropDatabase(g.dbURL) })
	return nil
}

func (g *ground) waitHealthy(ctx context.Context, url string, within time.Duration) error {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: insecureTLS()}}
	return g.poll(ctx, within, url, func() bool {
		resp, err := c.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

func (g *ground) waitTCP(ctx context.Context, addr string, within time.Duration) error {
	return g.poll(ctx, within, addr, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

func (g *ground) poll(ctx context.Context, within time.Duration, what string, ok func() bool) error {
	deadline := time.Now().Add(within)
	for !ok() {
		if err := g.exited(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s", what, within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// postgresURL is the machine's PostgreSQL, bridged into the namespace at the same address.
func postgresURL() string {
	if u := os.Getenv("SLESS_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

func newDatabase(ctx context.Context) (string, error) {
	admin, err := pgx.Connect(ctx, postgresURL())
	if err != nil {
		return "", fmt.Errorf("PostgreSQL at %s (set SLESS_TEST_POSTGRES_URL): %w", postgresURL(), err)
	}
	defer admin.Close(ctx)
	name := fmt.Sprintf("sless_e2e_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	u := strings.Replace(postgresURL(), "/postgres?", "/"+name+"?", 1)
	if u == postgresURL() {
		return "", errors.New("SLESS_TEST_POSTGRES_URL must name the postgres database, e.g. .../postgres?sslmode=disable")
	}
	return u, nil
}

func dropDatabase(u string) {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, postgresURL())
	if err != nil {
		return
	}
	defer c.Close(ctx)
	name := u[strings.LastIndex(u, "/")+1:]
	name, _, _ = strings.Cut(name, "?")
	_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
}

// insecureTLS is for health checks of components serving self-signed certificates.
func insecureTLS() *tls.Config { return &tls.Config{InsecureSkipVerify: true} } //nolint:gosec // loopback health checks only
