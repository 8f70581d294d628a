package buildkit

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"sless.dev/sless/test/testkit"
)

var versityBin = sync.OnceValues(func() (string, error) {
	if bin := os.Getenv("VERSITYGW"); bin != "" {
		return bin, nil
	}
	// The project's cached tool script builds it from the module proxy on first use.
	script, err := filepath.Abs("../test/tools/versitygw.sh")
	if err != nil {
		return "", err
	}
	out, err := exec.Command(script).Output()
	return strings.TrimSpace(string(out)), err
})

// startVersityGW runs a real S3 server (versitygw, posix backend over a temp dir) on
// loopback for the test and returns a store configuration for it; under -short it skips t
// (versitygw is a tool test/tools/versitygw.sh builds).
func startVersityGW(t *testing.T) S3Config {
	t.Helper()
	testkit.NeedsHeavy(t, "an S3 server (versitygw, test/tools/versitygw.sh)")
	bin, err := versityBin()
	if err != nil {
		t.Fatalf("versitygw: %v (set VERSITYGW or run test/tools/versitygw.sh)", err)
	}
	addr := testkit.FreeAddr(t)
	cmd := exec.Command(bin, "--port", addr, "--quiet", "posix", t.TempDir())
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID=sless-test", "ROOT_SECRET_ACCESS_KEY=sless-test-secret", "VGW_REGION=us-east-1")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting versitygw: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	waitTCP(t, addr, 15*time.Second)
	return S3Config{Endpoint: addr, AccessKey: "sless-test", SecretKey: "sless-test-secret", Bucket: "sless-artifacts", Region: "us-east-1"}
}

func waitTCP(t testing.TB, addr string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not reachable after %s: %v", addr, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
