package buildkit

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
)

// Artifact is a function built on this machine: run Command in Dir with Env added to the
// environment (plus PORT, SLESS_TIMEOUT_SECONDS, ...; see runtimes/README.md).
type Artifact struct {
	Runtime string   `json:"runtime"`
	Hash    string   `json:"hash"` // of the build context it was built from
	Dir     string   `json:"dir"`
	Command []string `json:"command"`
	Env     []string `json:"env"`
}

// LocalBuilder builds contexts without containers, the way their Dockerfiles would.
type LocalBuilder struct {
	Logger *slog.Logger
	// Env is added to the build tools' environment (e.g. GOPROXY, npm_config_registry).
	Env []string
	// MaxContextBytes caps the extracted context; default 1 GiB.
	MaxContextBytes int64
	// Output, when set, gets the build tools' own output as they write it (the error of a
	// failed step carries it too).
	Output io.Writer
	// Seal makes a finished build read-only (files and directories), so the function that
	// runs from it cannot change what a later start of it runs (sless dev).
	Seal bool
	// Sandbox, when set, runs the steps that execute what a tenant uploaded (installers,
	// compilers) with the tenant's privileges only, as Tenant; without it they run as this
	// process, with its environment.
	Sandbox Sandbox
	Tenant  string
}

// A Sandbox runs a tenant's build steps where the platform's privileges do not reach
// (sless dev's process pool, run as root). Enter hands a build directory to the tenant's
// build user; Leave kills what the tenant's steps left running and takes the directory back,
// writable by the platform only, before anything of the platform reads or writes in it.
type Sandbox interface {
	Enter(tenant, dir string) error
	RunStep(ctx context.Context, s Step) error
	Leave(tenant, dir string) error
}

// Step is one command of a sandboxed build.
type Step struct {
	Tenant string
	// Dir is the build directory, the only one the step may write besides its tenant's
	// cache (at StepCache); Cwd lies inside it.
	Dir, Cwd string
	// Argv[0] is absolute; Env is the whole environment (nothing of the platform's is added).
	Argv, Env []string
	// Toolchain is the installation of the interpreter or compiler, shown read-only when it
	// lies outside the system's directories.
	Toolchain string
	Output    io.Writer
}

// StepCache is where a sandboxed step finds its tenant's build cache, kept across builds.
const StepCache = "/cache"

// stepEnvPassed are settings of the platform's environment a sandboxed step gets: where
// packages come from. Nothing else of it (a credential, a data directory) reaches a build.
var stepEnvPassed = []string{"GOPROXY", "GOSUMDB", "GONOSUMDB", "GONOSUMCHECK", "GOPRIVATE", "GONOPROXY", "GOINSECURE",
	"npm_config_registry", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "LANG", "TZ"}

const artifactManifest = ".sless-artifact.json"

// LocalBuild builds with a default LocalBuilder.
func LocalBuild(ctx context.Context, contextData []byte, runtime, outDir string) (*Artifact, error) {
	return LocalBuilder{}.Build(ctx, contextData, runtime, outDir)
}

// Build extracts a build context (from NewBuildContext) into outDir and builds it for
// runtime. A directory that already holds the build of the same context is reused, so the
// same source is never built twice. Compiler and installer output is in the *BuildError.
func (b LocalBuilder) Build(ctx context.Context, contextData []byte, runtime, outDir string) (*Artifact, error) {
	ctx, span := tracer.Start(ctx, "buildkit.LocalBuild")
	defer span.End()
	span.SetAttributes(attribute.String("sless.runtime", runtime))
	art, err := b.build(ctx, contextData, runtime, outDir)
	if err != nil {
		recordError(span, err)
		return nil, err
	}
	return art, nil
}

func (b LocalBuilder) build(ctx context.Context, contextData []byte, runtime, outDir string) (*Artifact, error) {
	rt, err := LookupRuntime(runtime)
	if err != nil {
		return nil, err
	}
	logger := b.Logger
	if logger == nil {
		logger = slog.Default()
	}
	hash, err := contextHash(contextData)
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(outDir)
	if err != nil {
		return nil, fmt.Errorf("build directory %q: %w", outDir, err)
	}
	if art, ok := readArtifact(dir, hash); ok {
		logger.Debug("reusing local build", "dir", dir, "hash", hash)
		return art, nil
	}
	// Build next to the target and rename: a crash never leaves a half-built directory
	// that looks finished.
	tmp := dir + ".building"
	if err := os.RemoveAll(tmp); err != nil {
		return nil, fmt.Errorf("cleaning %s: %w", tmp, err)
	}
	if err := b.extract(contextData, tmp); err != nil {
		return nil, err
	}
	start := time.Now()
	art, err := b.buildSandboxed(ctx, rt, tmp, dir)
	if err != nil {
		return nil, err
	}
	art.Runtime, art.Hash = rt.Name, hash
	if err := writeArtifact(tmp, art); err != nil {
		return nil, err
	}
	_ = Unseal(dir)
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("replacing %s: %w", dir, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, fmt.Errorf("moving the build to %s: %w", dir, err)
	}
	if b.Seal {
		if err := chmodTree(dir, func(m fs.FileMode) fs.FileMode { return m &^ 0o222 }); err != nil {
			return nil, fmt.Errorf("sealing the build %s: %w", dir, err)
		}
	}
	logger.Info("built function locally", "runtime", rt.Name, "dir", dir, "hash", hash, "duration", time.Since(start))
	return art, nil
}

// buildSandboxed runs buildIn with the build directory handed to the sandbox for its
// duration, when there is one.
func (b LocalBuilder) buildSandboxed(ctx context.Context, rt Runtime, work, final string) (*Artifact, error) {
	if b.Sandbox == nil {
		return b.buildIn(ctx, rt, work, final)
	}
	if err := b.Sandbox.Enter(b.Tenant, work); err != nil {
		return nil, err
	}
	art, err := b.buildIn(ctx, rt, work, final)
	if lerr := b.Sandbox.Leave(b.Tenant, work); lerr != nil && err == nil {
		err = fmt.Errorf("taking the build back from the sandbox: %w", lerr)
	}
	return art, err
}

// Unseal makes a sealed build writable by its owner again, so it can be removed.
func Unseal(dir string) error {
	return chmodTree(dir, func(m fs.FileMode) fs.FileMode { return m | 0o200 })
}

// chmodTree changes the permission bits of everything under dir (symbolic links are left).
func chmodTree(dir string, mode func(fs.FileMode) fs.FileMode) error {
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.Chmod(p, mode(info.Mode().Perm()))
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// buildIn runs the language's build steps in work; the artifact refers to final paths and
// to the interpreter of rt's version found on this machine.
func (b LocalBuilder) buildIn(ctx context.Context, rt Runtime, work, final string) (*Artifact, error) {
	dockerfile, err := os.ReadFile(filepath.Join(work, DockerfilePath))
	if err != nil {
		return nil, fmt.Errorf("build context without %s: %w", DockerfilePath, err)
	}
	interp, err := Interpreter(rt)
	if err != nil {
		return nil, err
	}
	art := &Artifact{Dir: final}
	st := steps{b: b, rt: rt, work: work, interp: interp}
	switch rt.Language {
	case LanguageGo:
		env := append(goEnv(), "GOWORK="+filepath.Join(work, "go.work"))
		if b.Sandbox != nil {
			env = append(env, "GOCACHE="+StepCache+"/"+GoBuildCache, "GOMODCACHE="+StepCache+"/gomod", "GOPATH="+StepCache+"/gopath")
		}
		if err := st.run(ctx, work, env, interp, "mod", "download"); err != nil {
			return nil, err
		}
		if err := st.run(ctx, work, env, interp, "build", "-trimpath", "-o", filepath.Join(work, "function"), "./server"); err != nil {
			return nil, err
		}
		art.Command = []string{filepath.Join(final, "function")}
	case LanguagePython:
		art.Command = []string{interp, filepath.Join(final, "server", "server.py")}
		art.Env = []string{"SLESS_HANDLER=" + dockerfileArg(dockerfile, "HANDLER"), "PYTHONUNBUFFERED=1"}
		// As in the Dockerfile: a syntax error fails the build with the compiler's message.
		if err := st.run(ctx, work, nil, interp, "-m", "compileall", "-q", "handler"); err != nil {
			return nil, err
		}
		if hasRequirements(filepath.Join(work, "handler", "requirements.txt")) {
			// From handler/, like the Dockerfile: relative paths in requirements.txt are the user's.
			if err := st.run(ctx, filepath.Join(work, "handler"), nil, interp, "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
				"--target", filepath.Join(work, "deps"), "-r", "requirements.txt"); err != nil {
				return nil, err
			}
			art.Env = append(art.Env, "PYTHONPATH="+filepath.Join(final, "deps"))
		}
	case LanguageNode:
		art.Command = []string{interp, filepath.Join(final, "server", "server.js")}
		art.Env = []string{"SLESS_HANDLER=" + dockerfileArg(dockerfile, "HANDLER"), "NODE_ENV=production"}
		if err := st.npmInstall(ctx, interp, filepath.Join(work, "handler")); err != nil {
			return nil, err
		}
	}
	return art, nil
}

// npmInstall installs production dependencies when package.json declares any.
func (st steps) npmInstall(ctx context.Context, node, dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading package.json: %w", err)
	}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if err := json.Unmarshal(data, &pkg); err != nil {
		return &BuildError{Runtime: st.rt.Name, Step: "package.json", Err: err}
	}
	if len(pkg.Dependencies) == 0 {
		return nil
	}
	args := []string{"install", "--omit=dev", "--no-audit", "--no-fund"}
	if _, err := os.Stat(filepath.Join(dir, "package-lock.json")); err == nil {
		args = []string{"ci", "--omit=dev", "--no-audit", "--no-fund"}
	}
	npm := filepath.Join(filepath.Dir(node), "npm") // the npm of that Node.js
	if _, err := os.Stat(npm); err != nil {
		npm = "npm"
	}
	return st.run(ctx, dir, nil, npm, args...)
}

// steps runs the commands of one build of rt in work, whose interpreter or compiler is
// interp.
type steps struct {
	b            LocalBuilder
	rt           Runtime
	work, interp string
}

// run runs one command in dir (inside work): in the sandbox when there is one.
func (st steps) run(ctx context.Context, dir string, env []string, name string, args ...string) error {
	b := st.b
	var out bytes.Buffer
	var w io.Writer = &out
	if b.Output != nil {
		w = io.MultiWriter(&out, b.Output)
	}
	var err error
	if b.Sandbox != nil {
		err = b.Sandbox.RunStep(ctx, Step{Tenant: b.Tenant, Dir: st.work, Cwd: dir, Argv: append([]string{name}, args...),
			Env: append(b.stepEnv(st.interp), env...), Toolchain: toolchainDir(st.interp), Output: w})
	} else {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		cmd.Env = append(append(os.Environ(), b.Env...), env...)
		cmd.Stdout, cmd.Stderr = w, w
		err = cmd.Run()
	}
	if err != nil {
		return &BuildError{Runtime: st.rt.Name, Step: filepath.Base(name) + " " + strings.Join(args[:min(len(args), 2)], " "), Output: out.String(), Err: err}
	}
	return nil
}

// stepEnv is a sandboxed step's base environment: the interpreter's own directory first on
// the PATH (npm's scripts call node), a home and temporary directory of the jail's, the tenant's
// caches, the package-source settings passed on and the builder's own Env.
func (b LocalBuilder) stepEnv(interp string) []string {
	env := []string{"PATH=" + filepath.Dir(interp) + ":/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "TMPDIR=/tmp",
		"npm_config_cache=" + StepCache + "/npm", "PIP_CACHE_DIR=" + StepCache + "/pip"}
	for _, k := range stepEnvPassed {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return append(env, b.Env...)
}

// toolchainDir is the installation of interp (a pyenv Python's version directory, a Node.js
// tree) to show a sandboxed step.
func toolchainDir(interp string) string {
	if real, err := filepath.EvalSymlinks(interp); err == nil {
		interp = real
	}
	return filepath.Dir(filepath.Dir(interp))
}

// hasRequirements reports whether requirements.txt names at least one package.
func hasRequirements(file string) bool {
	f, err := os.Open(file)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line != "" && !strings.HasPrefix(line, "#") {
			return true
		}
	}
	return false
}

// dockerfileArg reads the default of "ARG name=value" (the context's own settings).
func dockerfileArg(dockerfile []byte, name string) string {
	for _, line := range strings.Split(string(dockerfile), "\n") {
		if v, ok := strings.CutPrefix(line, "ARG "+name+"="); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// contextHash recomputes a context's hash (sha256 of the uncompressed tar).
func contextHash(data []byte) (string, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return "", fmt.Errorf("build context is not gzip: %w", err)
	}
	h := newHasher()
	if _, err := io.Copy(h, zr); err != nil {
		return "", fmt.Errorf("reading build context: %w", err)
	}
	return h.hex(), nil
}

// extract unpacks regular files of a build context into dir, refusing unsafe names.
func (b LocalBuilder) extract(data []byte, dir string) error {
	limit := b.MaxContextBytes
	if limit == 0 {
		limit = 1 << 30
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("build context is not gzip: %w", err)
	}
	tr := tar.NewReader(zr)
	var total int64
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading build context: %w", err)
		}
		name := path.Clean(hdr.Name)
		if hdr.Typeflag != tar.TypeReg || checkKey(name) != nil {
			return fmt.Errorf("build context entry %q: only regular files with relative paths are allowed", hdr.Name)
		}
		if total += hdr.Size; total > limit {
			return fmt.Errorf("build context expands beyond %d bytes", limit)
		}
		if err := writeFile(filepath.Join(dir, filepath.FromSlash(name)), tr, os.FileMode(hdr.Mode)&0o755); err != nil {
			return err
		}
	}
}

func writeFile(p string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("extracting %s: %w", p, err)
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode|0o600)
	if err != nil {
		return fmt.Errorf("extracting %s: %w", p, err)
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("extracting %s: %w", p, err)
	}
	return nil
}

func readArtifact(dir, hash string) (*Artifact, bool) {
	data, err := os.ReadFile(filepath.Join(dir, artifactManifest))
	if err != nil {
		return nil, false
	}
	var art Artifact
	if json.Unmarshal(data, &art) != nil || art.Hash != hash || art.Dir != dir || len(art.Command) == 0 || !filepath.IsAbs(art.Command[0]) {
		return nil, false
	}
	return &art, true
}

func writeArtifact(dir string, art *Artifact) error {
	data, err := json.MarshalIndent(art, "", "  ")
	if err != nil {
		return err
	}
	// Created anew, never through what a build step left at its name (a link elsewhere).
	path := filepath.Join(dir, artifactManifest)
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("writing the build manifest: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("writing the build manifest: %w", err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing the build manifest: %w", err)
	}
	return nil
}
