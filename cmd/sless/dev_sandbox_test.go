package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDevBannerSaysWhenFunctionsAreNotSandboxed: run by a user other than root, sless dev
// cannot sandbox its functions; the banner says so and why, and sless dev serves as before.
// As root, the banner says they are sandboxed.
func TestDevBannerSaysWhenFunctionsAreNotSandboxed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs sless dev as another user: needs root")
	}
	out, stop := runDevCmd(t, "--data-dir", devDataDir(t), "--listen", "127.0.0.1:0")
	if text := waitOutput(t, out, "export SLESS_TOKEN", time.Minute); !strings.Contains(text, "Every function runs sandboxed") {
		t.Errorf("banner as root:\n%s", text)
	}
	_ = stop()

	// The test binary, where the user nobody may run it, in its CLI mode (main_test.go).
	dir := t.TempDir()
	for d := dir; d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe := filepath.Join(dir, "sless")
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, data, 0o755); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(dir, "data")
	if err := os.Mkdir(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dataDir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "--", "dev", "--data-dir", dataDir, "--listen", "127.0.0.1:0")
	cmd.Env = []string{"SLESS_TEST_AS_CLI=1", "HOME=" + dataDir, "PATH=" + os.Getenv("PATH")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Stderr = io.Discard
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var banner strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "export SLESS_TOKEN") {
		banner.WriteString(sc.Text() + "\n")
	}
	if !strings.Contains(banner.String(), "Functions are not sandboxed here (sless dev does not run as root)") {
		t.Fatalf("banner as nobody:\n%s", banner.String())
	}
}
