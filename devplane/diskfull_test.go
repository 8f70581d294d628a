package devplane_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/test/testkit"
)

// smallDisk names the 4 MiB tmpfs a test runs on (set in the re-executed test binary).
const smallDisk = "SLESS_TEST_SMALL_DISK"

// onSmallDisk runs the calling test again in a child of this test binary, inside a user and
// mount namespace of its own with a 4 MiB tmpfs at a fresh directory (the machine's mounts
// are untouched; no root needed). It returns that directory in the child, "" in the parent
// once the child passed.
func onSmallDisk(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv(smallDisk); dir != "" {
		return dir
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	script := `mount -t tmpfs -o size=4m tmpfs "$1" && exec "$2" -test.run "^$3\$" -test.count=1 -test.v`
	cmd := exec.Command("unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh", mnt, exe, t.Name())
	cmd.Env = append(os.Environ(), smallDisk+"="+mnt)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("the test on a small disk failed (%v):\n%s", err, out)
	}
	return ""
}

// TestDiskFullRecovers: with the data directory's disk full, a build fails with a status that
// says so, an API write answers 507 and changes nothing, and once there is room again the
// function becomes Ready by itself, without a restart.
func TestDiskFullRecovers(t *testing.T) {
	disk := onSmallDisk(t)
	if disk == "" {
		return
	}
	d := startDev(t, devOptions{dataDir: filepath.Join(disk, "data"), buildDir: filepath.Join(disk, "builds"), retryMax: time.Second})
	ctx := context.Background()
	rt := "go1.25"
	if _, err := d.client.CreateFunction(ctx, d.ns, api.CreateFunction{Name: "big", FunctionFields: api.FunctionFields{Runtime: &rt}}); err != nil {
		t.Fatal(err)
	}
	// A Go binary is several MiB: its build cannot fit.
	handler := "package handler\n\nfunc Handle(event map[string]interface{}) interface{} { return \"ok\" }\n"
	if _, err := d.client.UploadSource(ctx, d.ns, "big", strings.NewReader(string(testkit.Zip(t, map[string]string{"handler.go": handler})))); err != nil {
		t.Fatal(err)
	}
	var fn api.Function
	testkit.WaitFor(t, "the build to fail for lack of space", 2*time.Minute, func() bool {
		fn, _ = d.client.GetFunction(ctx, d.ns, "big")
		return fn.Status.Phase == api.PhaseFailed
	})
	if !strings.Contains(fn.Status.LastBuildError, "no space left on device") || !strings.Contains(fn.Status.Message, "retrying") {
		t.Fatalf("status of a build on a full disk: %+v; want the reason and that it is retried", fn.Status)
	}

	// The disk to the last byte: an API write fails cleanly.
	filler := filepath.Join(disk, "filler")
	if out, err := exec.Command("dd", "if=/dev/zero", "of="+filler, "bs=64k").CombinedOutput(); !strings.Contains(string(out), "No space left") {
		t.Fatalf("filling the disk: %v %s", err, out)
	}
	_, err := d.client.CreateFunction(ctx, d.ns, api.CreateFunction{Name: "more", FunctionFields: api.FunctionFields{Runtime: &rt}})
	if !isStatus(err, http.StatusInsufficientStorage) || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("create on a full disk: want 507 saying nothing changed, got %v", err)
	}
	if _, err := d.client.GetFunction(ctx, d.ns, "more"); !isStatus(err, http.StatusNotFound) {
		t.Fatalf("the failed create left a function behind: %v", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}

	// Room again: the retried build succeeds on its own.
	if err := unix.Mount("tmpfs", disk, "", unix.MS_REMOUNT, "size=256m"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the function to be Ready once there is room", 2*time.Minute, func() bool {
		fn, _ = d.client.GetFunction(ctx, d.ns, "big")
		return fn.Status.Ready
	})
	if code, body := d.invoke("big", `{}`); code != http.StatusOK || body != "ok" {
		t.Fatalf("invoke after recovery: %d %s", code, body)
	}
}
