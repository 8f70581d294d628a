package provider

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"sless.dev/sless/gateway/client"
)

// The acceptance tests run the real Terraform CLI (TF_ACC_TERRAFORM_PATH, else built by
// test/tools/terraform.sh) against a real `sless dev` started on a free loopback port with
// a temporary data directory. Both are shared by the package's tests and stopped in TestMain.
// Under -short (make test-unit) terraformBinary skips them, and TF_ACC stays unset; the
// schema, validator and conversion tests still run.

var protoV6Providers = map[string]func() (tfprotov6.ProviderServer, error){
	"sless": providerserver.NewProtocol6WithError(New("test")()),
}

// repoRoot is the sless module's directory, three levels above this package.
var repoRoot = func() string {
	dir, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		panic(err)
	}
	return dir
}()

func TestMain(m *testing.M) {
	flag.Parse()
	// terraform-plugin-testing runs resource.Test only with TF_ACC set; these tests are
	// self-contained, so they run whenever the Terraform CLI may be built. Never
	// TF_ACC_TERRAFORM_VERSION: it downloads.
	if !testing.Short() {
		os.Setenv("TF_ACC", "1")
	}
	os.Setenv("CHECKPOINT_DISABLE", "1")
	// The user's CLI configuration (mirrors, overrides, credentials) must not leak in.
	cliConfig, err := os.CreateTemp("", "sless-tf-cli-*.tfrc")
	if err != nil {
		panic(err)
	}
	cliConfig.Close()
	os.Setenv("TF_CLI_CONFIG_FILE", cliConfig.Name())
	code := m.Run()
	os.Remove(cliConfig.Name())
	if providerBinDir != "" {
		os.RemoveAll(providerBinDir)
	}
	dev.stop()
	os.Exit(code)
}

var terraformOnce = sync.OnceValues(func() (string, error) {
	if p := os.Getenv("TF_ACC_TERRAFORM_PATH"); p != "" {
		return p, nil
	}
	out, err := exec.Command("bash", filepath.Join(repoRoot, "test", "tools", "terraform.sh")).Output()
	if err != nil {
		return "", fmt.Errorf("test/tools/terraform.sh: %w", err)
	}
	p := strings.TrimSpace(string(out))
	return p, os.Setenv("TF_ACC_TERRAFORM_PATH", p)
})

// terraformBinary returns the Terraform CLI and points terraform-plugin-testing at it; under
// -short it skips t.
func terraformBinary(t *testing.T) string {
	t.Helper()
	// test/testkit.NeedsHeavy's rule, without its imports in this module.
	if testing.Short() {
		t.Skip("needs the Terraform CLI (test/tools/terraform.sh) and sless dev: run make test")
	}
	p, err := terraformOnce()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// slessDev is one running `sless dev`.
type slessDev struct {
	once     sync.Once
	err      error
	cmd      *exec.Cmd
	dir      string
	endpoint string
	token    string
	log      string
}

var dev slessDev

// sless starts `sless dev` on first use and sets SLESS_ENDPOINT/SLESS_TOKEN for the provider;
// it also makes sure the Terraform CLI is there.
func sless(t *testing.T) *slessDev {
	t.Helper()
	terraformBinary(t)
	dev.once.Do(func() { dev.err = dev.start() })
	if dev.err != nil {
		t.Fatalf("starting sless dev: %v", dev.err)
	}
	t.Setenv("SLESS_ENDPOINT", dev.endpoint)
	t.Setenv("SLESS_TOKEN", dev.token)
	return &dev
}

func (d *slessDev) start() error {
	dir, err := os.MkdirTemp("", "sless-tf-acc-")
	if err != nil {
		return err
	}
	d.dir = dir
	bin := filepath.Join(dir, "sless")
	build := exec.Command("go", "build", "-o", bin, "./cmd/sless")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/sless: %w\n%s", err, out)
	}
	d.log = filepath.Join(dir, "sless-dev.log")
	logFile, err := os.Create(d.log)
	if err != nil {
		return err
	}
	// Event triggers consume from the machine's RabbitMQ (started by test/tools/deps.sh).
	amqpURL := os.Getenv("SLESS_TEST_AMQP_URL")
	if amqpURL == "" {
		amqpURL = "amqp://guest:guest@127.0.0.1:5672/"
	}
	// The tests' functions call servers on this machine's loopback, which an isolated
	// function cannot reach: the host's network, as sless dev without root has.
	d.cmd = exec.Command(bin, "dev", "--data-dir", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0", "--amqp-url", amqpURL,
		"--function-network", "host")
	d.cmd.Stderr = logFile
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := d.cmd.Start(); err != nil {
		return fmt.Errorf("start sless dev: %w", err)
	}
	if err := d.readBanner(stdout); err != nil {
		d.stop()
		return fmt.Errorf("%w (log: %s)", err, d.log)
	}
	return nil
}

// readBanner takes the endpoint and token from the "export ..." lines sless dev prints, then
// keeps draining its stdout so it never blocks on a full pipe.
func (d *slessDev) readBanner(stdout io.Reader) error {
	found := make(chan error, 1)
	go func() {
		var endpoint, token string
		signaled := false
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if signaled {
				continue
			}
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "export SLESS_ENDPOINT="); ok {
				endpoint = v
			}
			if v, ok := strings.CutPrefix(line, "export SLESS_TOKEN="); ok {
				token = v
			}
			if endpoint != "" && token != "" {
				d.endpoint, d.token, signaled = endpoint, token, true
				found <- nil
			}
		}
		if !signaled {
			found <- errors.New("sless dev exited before printing its endpoint and token")
		}
	}()
	select {
	case err := <-found:
		return err
	case <-time.After(60 * time.Second):
		return errors.New("sless dev printed no endpoint and token within 60s")
	}
}

func (d *slessDev) stop() {
	if d.cmd == nil || d.cmd.Process == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = d.cmd.Process.Kill()
		<-done
	}
	os.RemoveAll(d.dir)
}

// apiClient is a client of the running sless dev with its tenant namespace, for checks.
func (d *slessDev) client(t *testing.T) *apiClient {
	t.Helper()
	c, err := client.New(d.endpoint, d.token, nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.WhoAmI(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return &apiClient{Client: c, namespace: id.Namespace}
}

// invoke calls a function URL and returns the status and body.
func invoke(url string) (int, string, error) {
	resp, err := http.Post(url, "application/json", strings.NewReader(`{}`))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// runCounter counts the POSTs a handler sends to its URL: one per run.
type runCounter struct {
	URL string
	n   atomic.Int64
}

func newRunCounter(t *testing.T) *runCounter {
	c := &runCounter{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			c.n.Add(1)
		}
	}))
	t.Cleanup(srv.Close)
	c.URL = srv.URL
	return c
}

// checkRuns expects the job handler to have run n times.
func checkRuns(runs *runCounter, n int) func(*terraform.State) error {
	return func(*terraform.State) error {
		if got := runs.n.Load(); got != int64(n) {
			return fmt.Errorf("the handler ran %d times, want %d", got, n)
		}
		return nil
	}
}
