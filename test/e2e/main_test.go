//go:build e2e

package e2e

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"sless.dev/sless/test/testenv"
)

// g is the ground every journey runs on.
var g *ground

func TestMain(m *testing.M) {
	if os.Getenv(envContainer) != "" { // this binary is a container's init (runtime_test.go)
		containerInit()
	}
	if os.Getenv(envInside) == "" {
		tools, err := buildTools()
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			os.Exit(1)
		}
		code := runOutside(tools)
		_ = os.RemoveAll(filepath.Dir(tools["sless"]))
		os.Exit(code)
	}
	os.Exit(runInside(m))
}

func runInside(m *testing.M) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithCancel(context.Background())
	start := time.Now()
	flag.Parse() // the ground starts only what the selected tests need (willRun)
	var err error
	g, err = startGround(ctx, insideTools(), log)
	defer func() {
		cancel() // informers and watches end before the API server is asked to stop
		if g != nil {
			g.stop()
		}
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: ground:", err)
		if g != nil {
			dumpLogs(g.dir)
		}
		return 1
	}
	log.Info("ground ready", "took", time.Since(start).Round(time.Millisecond))
	watch, err := plantCanary()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	code := m.Run()
	if err := watch.check(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		code = 1
	}
	if code != 0 {
		dumpLogs(g.dir)
	}
	return code
}

// dumpLogs prints the tail of every component log and of the platform's pods, so a failure
// in CI explains itself.
func dumpLogs(dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "logs", "*.log"))
	pods, _ := filepath.Glob(filepath.Join(dir, "pods", "*", "sless-system_*.log"))
	files = append(files, pods...)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		fmt.Fprintf(os.Stderr, "==== %s (tail)\n%s\n", filepath.Base(f), tail(b, 3000))
	}
}

// buildTools builds or finds every binary and image stand-in the ground runs (cached under
// ~/.cache/sless-tools by the repository's scripts) and the sless binary itself, on the host
// network: inside the namespace there is no module proxy.
func buildTools() (map[string]string, error) {
	root := testenv.RepoRoot()
	tools := map[string]string{}
	for key, script := range map[string]string{"envtest": "envtest.sh", "keda": "keda.sh", "versitygw": "versitygw.sh",
		"terraform": "terraform.sh", "kaniko": "kaniko.sh", "ko": "ko.sh", "base-images": "base-images.sh"} {
		out, err := testenv.Tool(script, "K8S_COMMANDS=kube-apiserver kube-controller-manager kube-scheduler")
		if err != nil {
			return nil, err
		}
		tools[key] = out
	}
	// The module cache is the GOPROXY of the Dockerfile's build (TestPlatformDockerfile):
	// complete it with every module of the build list, as a proxy would hold them.
	cmd := exec.Command("go", "mod", "download")
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go mod download: %w", err)
	}
	bin, err := os.MkdirTemp("", "sless-e2e-bin-")
	if err != nil {
		return nil, err
	}
	tools["sless"] = filepath.Join(bin, "sless")
	cmd = exec.Command("go", "build", "-o", tools["sless"], "./cmd/sless")
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("building sless: %w", err)
	}
	// The provider in a directory of its own, for the CLI's dev_overrides.
	tools["terraform-provider"] = filepath.Join(bin, "provider", "terraform-provider-sless")
	cmd = exec.Command("go", "build", "-o", tools["terraform-provider"], ".")
	cmd.Dir, cmd.Stdout, cmd.Stderr = filepath.Join(root, "terraform-provider-sless"), os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("building the Terraform provider: %w", err)
	}
	return tools, nil
}
