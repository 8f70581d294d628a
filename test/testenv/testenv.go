// Package testenv starts a real kube-apiserver + etcd (envtest, built from source by
// test/tools/envtest.sh) with sless's CRDs and the CRDs of the KEDA and HTTP add-on Go modules
// this repository pins, so tests run against the same schemas a cluster would enforce.
//
// Under -short (make test-unit) nothing starts: Main runs the package's tests without a
// control plane and Need skips each test that uses one, so the pure tests of a package that
// also has envtest tests still run.
package testenv

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/modfile"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"sless.dev/sless/apis/scheme"
	"sless.dev/sless/test/testkit"
)

// Env is a running control plane and a client for it.
type Env struct {
	Config *rest.Config
	Client client.Client
	Scheme *k8sruntime.Scheme
	env    *envtest.Environment
}

// RepoRoot is the directory holding the repository's go.mod: the nearest one of module
// sless.dev/sless above the working directory (go test runs in the package's directory).
// Found from the working directory, not runtime.Caller, so it holds under -trimpath too.
func RepoRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	for {
		if mod, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && modfile.ModulePath(mod) == "sless.dev/sless" {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			panic("no go.mod of module sless.dev/sless above the working directory")
		}
		dir = parent
	}
}

// Assets returns the directory with kube-apiserver and etcd: $KUBEBUILDER_ASSETS when set,
// otherwise whatever test/tools/envtest.sh prints (it builds them once and caches them).
func Assets() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	return Tool("envtest.sh")
}

// Tool runs one of the repository's cached tool builders (test/tools/<script>) with env
// added to the environment and returns what it printed: a tool's path or directory.
func Tool(script string, env ...string) (string, error) {
	var stdout bytes.Buffer
	cmd := exec.Command("bash", filepath.Join(RepoRoot(), "test", "tools", script))
	cmd.Env, cmd.Stdout, cmd.Stderr = append(os.Environ(), env...), &stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("test/tools/%s: %w", script, err)
	}
	return strings.TrimSpace(stdout.String()), nil
}

// BuiltTool is Tool for a test: under -short it skips t rather than build the tool, and it
// fails t if the script does.
func BuiltTool(t testing.TB, script string, env ...string) string {
	t.Helper()
	testkit.NeedsHeavy(t, "test/tools/"+script)
	out, err := Tool(script, env...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// CRDPaths lists sless's CRD directory and the KEDA and HTTP add-on CRD files, located in the
// module cache at exactly the versions go.mod pins (never copied into this repository).
func CRDPaths() ([]string, error) {
	paths := []string{filepath.Join(RepoRoot(), "config", "crd", "bases")}
	for mod, glob := range map[string]string{
		"github.com/kedacore/keda/v2":     "keda.sh_*.yaml",
		"github.com/kedacore/http-add-on": "http.keda.sh_*.yaml",
	} {
		cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", mod)
		cmd.Dir = RepoRoot()
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("locate module %s: %w", mod, err)
		}
		files, err := filepath.Glob(filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "bases", glob))
		if err != nil || len(files) == 0 {
			return nil, fmt.Errorf("no CRDs matching %s in module %s", glob, mod)
		}
		paths = append(paths, files...)
	}
	return paths, nil
}

// Start brings up the control plane with every CRD installed.
func Start() (*Env, error) {
	assets, err := Assets()
	if err != nil {
		return nil, err
	}
	crds, err := CRDPaths()
	if err != nil {
		return nil, err
	}
	s, err := scheme.New()
	if err != nil {
		return nil, err
	}
	e := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     crds,
		ErrorIfCRDPathMissing: true,
		Scheme:                s,
		// envtest's default 20 s for kube-apiserver to be ready is less than it takes while
		// make test-e2e's own control plane and kaniko builds share the 2 cores (each
		// attempt then timed out, 5 times over); readiness is polled, so an unloaded start
		// is as quick as ever.
		ControlPlaneStartTimeout: 2 * time.Minute,
	}
	// envtest's default service range is a /24; a cluster-sized one lets scale tests create
	// thousands of function Services.
	e.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", "10.96.0.0/12")
	cfg, err := e.Start()
	if err != nil {
		return nil, fmt.Errorf("start envtest with assets from %s: %w", assets, err)
	}
	// A generous client rate limit: tests create many objects quickly.
	cfg.QPS, cfg.Burst = 500, 1000
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		_ = e.Stop()
		return nil, err
	}
	return &Env{Config: cfg, Client: c, Scheme: s, env: e}, nil
}

// Stop tears the control plane down.
func (e *Env) Stop() error { return e.env.Stop() }

// Need skips t under -short: t uses the control plane (Main's or its own Start), which
// make test-unit does not start.
func Need(t testing.TB) {
	t.Helper()
	testkit.NeedsHeavy(t, "envtest (kube-apiserver, etcd)")
}

// ForTest starts a control plane of t's own, stopped when t ends; under -short t is skipped.
func ForTest(t testing.TB) *Env {
	t.Helper()
	Need(t)
	e, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop() })
	return e
}

// Short parses the test flags and reports whether -short is set, for a TestMain that starts
// the control plane itself: under -short it runs the tests without one.
func Short() bool {
	flag.Parse()
	return testing.Short()
}

// Main is a TestMain body: it starts the control plane once for the package, stores it in
// *env, runs the tests and stops it. Under -short it starts nothing and leaves *env nil; the
// tests that use it call Need first.
func Main(m *testing.M, env **Env) {
	if Short() {
		os.Exit(m.Run())
	}
	e, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		os.Exit(1)
	}
	*env = e
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "testenv: stop:", err)
	}
	os.Exit(code)
}

// WriteKubeconfig writes a kubeconfig for cfg (envtest's admin client certificate, or a
// token) to path, for commands that take --kubeconfig or $KUBECONFIG.
func WriteKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	return clientcmd.WriteToFile(*kc, path)
}
