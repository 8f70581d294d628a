// Package pool runs functions as child processes on this machine for `sless dev`: the
// local counterpart of the Deployment + HTTPScaledObject that KEDA scales in a cluster.
//
// Each function gets processes of its runtime wrapper, each listening on a Unix socket in a
// directory of its own that only its user can open (no other user, and no web page through
// the loopback network, reaches a function around the gateway). Run as root, the pool
// sandboxes every function (sandbox.go, jail.go): a user of its own, a root showing its build
// and a private /tmp only, memory_mb and a process limit. The first request to a function
// at zero is held until a process answers its health check (cold start); concurrency above
// the target starts more processes up to the maximum; processes idle for the scale-down
// period are stopped (MinProcs stay warm); a crashed process is replaced and held requests
// are retried once. Every process runs in its own process group, killed when it exits, and
// recorded in RunDir so a later pool kills what survived a crash.
package pool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/rules"
)

var tracer = otel.Tracer("sless.dev/sless/devplane/pool")

// Spec is how one function runs.
type Spec struct {
	// Artifact is the local build (command, directory, runtime environment).
	Artifact *buildkit.Artifact
	// Env is the function's own environment (Function env_vars).
	Env map[string]string
	// Timeout bounds one invocation inside the wrapper (SLESS_TIMEOUT_SECONDS); 0 = none.
	Timeout time.Duration
	// MinProcs stay running while idle; MaxProcs caps the processes (at least 1).
	MinProcs, MaxProcs int
	// Target is the number of concurrent requests per process above which another process
	// starts (the concurrency scaling target; at least 1).
	Target int
	// ScaleDown is how long a process may stay idle before it is stopped.
	ScaleDown time.Duration
	// Disabled stops every process and refuses invocations (all http triggers are off).
	Disabled bool
	// MemoryMB caps the memory of each sandboxed process (memory_mb); 0 = none.
	MemoryMB int
	// Mask hides the values of the function's secrets in everything the pool passes on of
	// what its processes print: each line (OnOutput and the Logger's "function output"), the
	// output quoted in start-up errors and crash warnings, a job's result, output and error.
	// A process masks with the Mask of the spec it was started with; a change of Mask alone
	// restarts nothing.
	Mask *rules.SecretMasker
	// Group names the function the entry belongs to when several entries (its revisions)
	// are one function: they share its user and its task limit. Default: the entry's key.
	// It is read when the key is first set.
	Group string
	// Files are shown to each process as read-only directories of files (directory → file
	// name → content: a function's secret_files), on a tmpfs of its jail only, so they are
	// never written to disk. Only a sandboxed pool can show them (Set refuses them
	// otherwise).
	Files map[string]map[string][]byte
}

// ErrFilesNeedSandbox refuses Spec.Files where functions run unjailed: their paths
// (/var/sless/secrets/…) exist only inside a jail's own root.
var ErrFilesNeedSandbox = errors.New("files (secret_files) are shown only to sandboxed functions, and this pool runs none: run sless dev as root on Linux with the sandbox on, or read the values through secret_env")

// Options tunes a Pool; zero values take the documented defaults.
type Options struct {
	Logger *slog.Logger
	// StartTimeout bounds a cold start: process start until /healthz answers. Default 30s.
	StartTimeout time.Duration
	// StopGrace is how long a stopped process may drain after SIGTERM before SIGKILL.
	// Default 5s.
	StopGrace time.Duration
	// Tick is how often idle processes are looked for and MinProcs ensured. Default 200ms.
	Tick time.Duration
	// OnOutput, when set, gets every line a function's processes print, within the output
	// limits (a line saying how much was dropped takes the place of the rest) and masked by
	// the spec's Mask; the pool's Logger gets the same lines ("function output"). It must not
	// block.
	OnOutput func(Line)
	// OutputRate and OutputBurst cap the lines per second a function's processes print
	// together, so a flood neither fills the log nor holds the machine. Defaults 1,000/s and
	// 5,000.
	OutputRate  float64
	OutputBurst int
	// OutputBytesRate and OutputBytesBurst cap the same output in bytes: at most
	// OutputBytesBurst + OutputBytesRate×t bytes pass in any t seconds. Defaults 256 KiB/s
	// and 1 MiB; the burst is at least 64 KiB (the longest line).
	OutputBytesRate  float64
	OutputBytesBurst int
	// RunDir keeps a record of each running process group, so that New can kill what a
	// function forked when the last pool was killed; "" keeps none.
	RunDir string
	// OnStart, when set, learns how each cold start of a function ended (err nil: ready), so
	// a start-up error (a Python syntax error, a missing module) can be shown to the user.
	// It must not block.
	OnStart func(key string, err error)
	// Sandbox isolates functions from each other and from the pool where this machine
	// allows it (see Pool.Isolation).
	Sandbox SandboxOptions
	// Build bounds the build steps run in sandboxes (BuildSandbox).
	Build BuildOptions
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 30 * time.Second
	}
	if o.StopGrace <= 0 {
		o.StopGrace = 5 * time.Second
	}
	if o.OutputRate <= 0 {
		o.OutputRate = 1000
	}
	if o.OutputBurst <= 0 {
		o.OutputBurst = 5000
	}
	if o.OutputBytesRate <= 0 {
		o.OutputBytesRate = 256 << 10
	}
	if o.OutputBytesBurst <= 0 {
		o.OutputBytesBurst = 1 << 20
	}
	o.OutputBytesBurst = max(o.OutputBytesBurst, maxLine)
	if o.Tick <= 0 {
		o.Tick = 200 * time.Millisecond
	}
	o.Build = o.Build.withDefaults()
	return o
}

// Errors an invocation can fail with before reaching a process.
var (
	ErrDisabled = errors.New("function is disabled")
	ErrUnknown  = errors.New("no such function in the local pool")
	ErrClosed   = errors.New("local pool is closed")
)

// StartError is a cold start that failed twice in a row (the held request was retried once).
type StartError struct {
	Function string
	Err      error
}

func (e *StartError) Error() string {
	return fmt.Sprintf("function %s could not be started: %v", e.Function, e.Err)
}
func (e *StartError) Unwrap() error { return e.Err }

// Pool runs the processes of every deployed function. Its RoundTrip serves requests whose
// Host is a function key given to Set.
type Pool struct {
	opts      Options
	log       *slog.Logger
	transport *http.Transport
	// health probes readiness; it never reuses connections (a probe must reach the new
	// process).
	health *http.Client
	// sockDir holds the processes' sockets (the pool's alone); seq names them; procs are the
	// started processes by address, for the dial's check of who listens.
	sockDir string
	seq     atomic.Int64
	procs   sync.Map // addr → *process
	// jail starts the processes sandboxed; nil when it cannot (jailErr says why).
	jail    *jailer
	jailErr error
	// builds runs tenants' build steps in jails (with jail).
	builds *buildSandbox

	mu     sync.RWMutex
	fns    map[string]*function
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup
}

var _ http.RoundTripper = (*Pool)(nil)

// New starts a pool after killing what a crashed earlier pool left in opts.RunDir; Close
// stops it and every process it runs.
func New(opts Options) (*Pool, error) {
	opts = opts.withDefaults()
	log := opts.Logger.With("component", "local-pool")
	if err := reapGroups(opts.RunDir, log); err != nil {
		return nil, err
	}
	// A short path: a socket's path must fit in 108 bytes, a data directory need not.
	sockDir, err := os.MkdirTemp("", "sless-fn-")
	if err != nil {
		return nil, fmt.Errorf("creating the function socket directory: %w", err)
	}
	p := &Pool{opts: opts, log: log, sockDir: sockDir, fns: map[string]*function{}, done: make(chan struct{})}
	if p.jail, p.jailErr = newJailer(opts.Sandbox, sockDir); p.jailErr != nil {
		log.Info("functions run as the user of sless dev, not sandboxed", "reason", p.jailErr)
	} else {
		p.builds = &buildSandbox{p: p, opts: opts.Build, tenants: map[string]*buildTenant{}}
	}
	dial := p.dialProcess
	p.transport = &http.Transport{
		DialContext:         dial,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true, // bodies pass through untouched
	}
	p.health = &http.Client{Timeout: time.Second, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
	p.wg.Add(1)
	go p.tickLoop()
	return p, nil
}

// socketPath is where the process addressed as host listens.
func (p *Pool) socketPath(host string) string { return filepath.Join(p.sockDir, host) }

// Isolation is how functions are kept apart from each other and from the machine.
type Isolation struct {
	// Sandboxed: each function runs as a user of its own in a mount namespace of its own;
	// Why says why not otherwise.
	Sandboxed bool
	Why       string
	// Limits says what holds memory_mb and the task limit (cgroup v2, v1, or polling).
	Limits string
	// Network says what functions reach on the network.
	Network string
}

// Isolation reports how this pool isolates functions.
func (p *Pool) Isolation() Isolation {
	if p.jail == nil {
		return Isolation{Why: p.jailErr.Error()}
	}
	return Isolation{Sandboxed: true, Limits: p.jail.Limits(), Network: p.jail.Network()}
}

// sandbox is the sandbox called name (see jailer.sandbox); nil when functions run
// unsandboxed.
func (p *Pool) sandbox(name string) (*sandbox, error) {
	if p.jail == nil {
		return nil, nil
	}
	return p.jail.sandbox(name)
}

func (p *Pool) release(sb *sandbox) {
	if sb != nil {
		p.jail.release(sb)
	}
}

// dialProcess connects to the socket of the process a URL's host names ("p<n>:80") and
// checks that the process listening there is that one (its pid, and its user when
// sandboxed), so a connection made for a function reaches that function or nothing, whatever
// its socket's path came to lead to.
func (p *Pool) dialProcess(ctx context.Context, _, addr string) (net.Conn, error) {
	host := hostOnly(addr)
	v, ok := p.procs.Load(host)
	if !ok {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: fmt.Errorf("no function process %q: %w", host, fs.ErrNotExist)}
	}
	pr := v.(*process)
	conn, err := dialUnix(ctx, pr.sock)
	if err != nil {
		return nil, err
	}
	if err := pr.checkPeer(conn.(*net.UnixConn)); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// dialUnix connects to a Unix socket within dialTimeout, trying again while its backlog is
// full (a non-blocking connect to a Unix socket fails with EAGAIN then, where TCP would wait).
func dialUnix(ctx context.Context, path string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	var d net.Dialer
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		conn, err := d.DialContext(ctx, "unix", path)
		if err == nil || !errors.Is(err, syscall.EAGAIN) {
			return conn, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(delay):
		}
	}
}

// dialTimeout bounds a connection to a process, retries on a full backlog included.
const dialTimeout = 5 * time.Second

// Socket is the Unix socket of the process at addr (from Stats), as the pool dials it.
func (p *Pool) Socket(addr string) string { return p.socketPath(addr) }

// Dial connects to a process by an address from Stats (tests and benchmarks call processes
// around the gateway this way).
func (p *Pool) Dial(ctx context.Context, addr string) (net.Conn, error) {
	return p.dialProcess(ctx, "unix", addr)
}

// Set deploys or updates the function served for key. A new artifact or environment
// replaces the running processes (in-flight requests finish on the old ones).
func (p *Pool) Set(key string, spec Spec) error {
	if spec.Artifact == nil || len(spec.Artifact.Command) == 0 {
		return fmt.Errorf("function %s: no artifact to run", key)
	}
	if len(spec.Files) > 0 && p.jail == nil {
		return fmt.Errorf("function %s: %w", key, ErrFilesNeedSandbox)
	}
	spec.MaxProcs = max(spec.MaxProcs, 1)
	spec.MinProcs = min(max(spec.MinProcs, 0), spec.MaxProcs)
	spec.Target = max(spec.Target, 1)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	f := p.fns[key]
	if f == nil {
		group := spec.Group
		if group == "" {
			group = key
		}
		sb, err := p.sandbox(group)
		if err != nil {
			p.mu.Unlock()
			return fmt.Errorf("function %s: %w", key, err)
		}
		f = newFunction(p, key, sb)
		p.fns[key] = f
	}
	p.mu.Unlock()
	f.setSpec(spec)
	return nil
}

// Remove stops the function's processes and forgets it.
func (p *Pool) Remove(key string) {
	p.mu.Lock()
	f := p.fns[key]
	delete(p.fns, key)
	p.mu.Unlock()
	if f != nil {
		f.remove()
	}
}

// Stats reports a function's processes; the zero value for an unknown key.
type Stats struct {
	Processes, Ready, InFlight int
	PIDs                       []int
	// Addrs are the addresses of the ready processes, for Dial.
	Addrs []string
}

// Stats returns the current state of key's processes.
func (p *Pool) Stats(key string) Stats {
	f := p.lookup(key)
	if f == nil {
		return Stats{}
	}
	return f.stats()
}

// Close stops every process and waits for them to exit.
func (p *Pool) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.done)
	fns := p.fns
	p.fns = map[string]*function{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, f := range fns {
		wg.Add(1)
		go func() { defer wg.Done(); f.remove() }()
	}
	wg.Wait()
	p.wg.Wait()
	p.transport.CloseIdleConnections()
	if p.jail != nil {
		p.builds.close()
		p.jail.thread.stop() // its namespace, and the roots in it, go with it
	}
	_ = os.RemoveAll(p.sockDir)
}

func (p *Pool) lookup(key string) *function {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.fns[key]
}

// tickLoop scales idle functions down and keeps MinProcs running.
func (p *Pool) tickLoop() {
	defer p.wg.Done()
	t := time.NewTicker(p.opts.Tick)
	defer t.Stop()
	for {
		select {
		case <-p.done:
			return
		case now := <-t.C:
			p.mu.RLock()
			fns := make([]*function, 0, len(p.fns))
			for _, f := range p.fns {
				fns = append(fns, f)
			}
			p.mu.RUnlock()
			for _, f := range fns {
				f.tick(now)
			}
		}
	}
}

// RoundTrip forwards req to a process of the function named by req.Host, starting one when
// needed. A request that could not be delivered (the process died before accepting the
// connection) is retried once on another process; one the function received is not, since it
// may have had effects.
func (p *Pool) RoundTrip(req *http.Request) (*http.Response, error) {
	key := hostOnly(req.Host)
	if key == "" && req.URL != nil {
		key = hostOnly(req.URL.Host)
	}
	f := p.lookup(key)
	if f == nil {
		closeBody(req)
		return nil, fmt.Errorf("%w: %s", ErrUnknown, key)
	}
	ctx, span := tracer.Start(req.Context(), "local.invoke", trace.WithAttributes(attribute.String("sless.function", key)))
	defer span.End()
	var held *heldBody
	if req.Body != nil && req.Body != http.NoBody {
		held = &heldBody{ReadCloser: req.Body, held: true}
		defer held.release()
	}
	for attempt := 1; ; attempt++ {
		proc, cold, err := f.acquire(ctx)
		if err != nil {
			if held != nil {
				_ = held.Close() // done on release
			}
			span.SetStatus(codes.Error, err.Error())
			return nil, err
		}
		span.SetAttributes(attribute.Bool("sless.cold_start", cold), attribute.String("sless.process", proc.addr))
		out := new(http.Request)
		*out = *req
		u := *req.URL
		u.Scheme, u.Host = "http", proc.addr
		out.URL = &u
		if held != nil {
			out.Body = held
		}
		resp, err := p.transport.RoundTrip(out.WithContext(ctx))
		if err != nil {
			f.release(proc)
			if listenerGone(err) {
				// The socket refuses or is gone: the process is exiting (its exit may be
				// processed later on a loaded machine), so no request may go to it again.
				f.retire(proc)
			} else {
				f.reapIfDead(proc, deathWait)
			}
			var op *net.OpError
			if attempt == 1 && errors.As(err, &op) && op.Op == "dial" && ctx.Err() == nil {
				continue
			}
			span.SetStatus(codes.Error, err.Error())
			return nil, fmt.Errorf("function %s: %w", key, err)
		}
		resp.Body = releasing(resp, func() { f.release(proc) })
		// As the KEDA interceptor does: whether the request waited for a process to start.
		resp.Header.Set(rules.HeaderBackendColdStart, strconv.FormatBool(cold))
		return resp, nil
	}
}

// listenerGone reports a connection a process's socket refused, no longer has or has lost to
// another listener: its server has closed, unlike a dial that timed out.
func listenerGone(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNotTheProcess)
}

// deathWait is how long a failed request waits to learn whether its process died, so that
// the next request is not sent to a process that is still exiting.
const deathWait = 200 * time.Millisecond

// heldBody keeps a request's body open until the last attempt: the transport closes the body
// on every error, even a dial's that read none of it, and the retry sends it again. A close
// asked for meanwhile happens on release.
type heldBody struct {
	io.ReadCloser
	mu           sync.Mutex
	held, closed bool
}

func (b *heldBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held || b.closed {
		b.closed = true
		return nil
	}
	b.closed = true
	return b.ReadCloser.Close()
}

func (b *heldBody) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held = false
	if b.closed {
		_ = b.ReadCloser.Close()
	}
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
