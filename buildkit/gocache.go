package buildkit

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// GoBuildCache is the subdirectory of a tenant's build cache (StepCache) Go compiles into.
const GoBuildCache = "go-build"

// goEnv is the environment of every Go function's build.
func goEnv() []string {
	return []string{"CGO_ENABLED=0", "GOTOOLCHAIN=local", "GOFLAGS=-buildvcs=false"}
}

// WarmGoCache fills dir, a Go build cache, with what the build of every Go function
// compiles — the standard library packages the wrapper imports — once per Go version (a
// marker file, under a lock, so processes sharing dir warm it once). It builds the platform's
// own wrapper with an empty handler, as the platform: no tenant's code runs, so sandboxed
// builds may lay dir read-only under their own cache (devplane/pool's BuildOptions.Layers)
// instead of compiling the standard library again for every tenant. Every Go runtime builds
// with this machine's one toolchain, so one warm serves them all.
func WarmGoCache(ctx context.Context, dir string) error {
	var runtime, goBin string
	for _, name := range RuntimeNames() {
		if rt := Runtimes[name]; rt.Language == LanguageGo {
			if bin, err := Interpreter(rt); err == nil {
				runtime, goBin = name, bin
			}
		}
	}
	if goBin == "" {
		return nil // no Go function can be built here either
	}
	version, err := exec.CommandContext(ctx, goBin, "env", "GOVERSION").Output()
	if err != nil {
		return fmt.Errorf("warming the Go build cache: %s env GOVERSION: %w", goBin, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".warm.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	marker := filepath.Join(dir, ".warm-"+strings.TrimSpace(string(version)))
	if _, err := os.Stat(marker); err == nil {
		return nil
	}
	src, err := emptyGoFunction(ctx, runtime)
	if err != nil {
		return err
	}
	bc, err := NewBuildContext(ctx, src)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "sless-go-warm-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	b := LocalBuilder{Env: []string{"GOCACHE=" + dir}}
	if _, err := b.Build(ctx, bc.Data, runtime, filepath.Join(tmp, "build")); err != nil {
		return fmt.Errorf("warming the Go build cache: %w", err)
	}
	// Files readable by every build user; directories writable too, as a tenant's overlay
	// shows them: its new entries go to its own upper layer (the lower one is never written
	// through an overlay), and the parent directory keeps everyone else out.
	if err := os.Chmod(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	if err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		switch {
		case err != nil || info.Mode()&os.ModeSymlink != 0:
			return err
		case info.IsDir():
			return os.Chmod(p, 0o777)
		default:
			return os.Chmod(p, 0o444)
		}
	}); err != nil {
		return err
	}
	return os.WriteFile(marker, nil, 0o644)
}

// emptyGoFunction is a Go function that does nothing, as an upload.
func emptyGoFunction(ctx context.Context, runtime string) (*Source, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.Create("handler.go")
	if err == nil {
		_, err = w.Write([]byte("package handler\n\nfunc Handle(event map[string]interface{}) interface{} { return nil }\n"))
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		return nil, err
	}
	return ValidateBytes(ctx, buf.Bytes(), runtime, "", DefaultLimits())
}
