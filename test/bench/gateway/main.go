// Command gateway benchmarks the `sless gateway` /fn/ path against a bare
// httputil.ReverseProxy to the same upstream, at the same concurrency, in one run:
//
//	go run ./test/bench/gateway -requests 20000 -concurrency 32 -rounds 3
//
// The gateway runs as its own process with the cluster backend on a real API server
// (envtest), invocation history in PostgreSQL and the tracing SDK on: the production path.
// The bare proxy runs as its own process too (this program re-executed with -bare). The
// upstream standing where the KEDA interceptor would be is a minimal HTTP server in this
// process, shared by both. Rounds alternate gateway and bare; medians are reported.
// RSS is the gateway's peak resident set (VmHWM) under load; memory per held request is the
// growth of VmRSS while -held requests wait at the upstream.
//
// With -streams (issue 29) it measures streamed answers side by side, gateway vs direct (and
// the bare proxy): the time to an event stream's first byte, the throughput of a 100 MiB
// chunked answer, and -idle-streams idle SSE streams held open through the gateway (its
// VmRSS, and the p99 of new calls answered meanwhile).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway/api"
	gwclient "sless.dev/sless/gateway/client"
	"sless.dev/sless/test/testenv"
)

var (
	requests    = flag.Int("requests", 20000, "requests per round and proxy")
	concurrency = flag.Int("concurrency", 32, "concurrent keep-alive clients")
	rounds      = flag.Int("rounds", 3, "alternating rounds; medians are reported")
	held        = flag.Int("held", 2000, "requests held at the upstream to measure memory per held request")
	slessBin    = flag.String("sless", "", "sless binary (default: built from ./cmd/sless)")
	postgres    = flag.String("postgres-url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL server; a fresh database is created and dropped")
	withHistory = flag.Bool("history", true, "record invocations in PostgreSQL, as in production")
	streams     = flag.Bool("streams", false, "measure streamed answers instead: time to first byte, 100 MiB, idle SSE streams")
	idleStreams = flag.Int("idle-streams", 1000, "with -streams: idle SSE streams held open through the gateway")
	bare        = flag.String("bare", "", "internal: run the bare reverse proxy listening on this address")
	bareTarget  = flag.String("bare-target", "", "internal: upstream of the bare proxy")
)

const hmacKey = "gateway-bench-hmac-key-0123456789abcdef"

func main() {
	flag.Parse()
	log.SetFlags(0)
	if *bare != "" {
		runBare(*bare, *bareTarget)
		return
	}
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

// runBare is the baseline: a bare httputil.ReverseProxy with the same transport limits as the
// gateway's interceptor transport.
func runBare(addr, target string) {
	u, err := url.Parse(target)
	if err != nil {
		log.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 512, IdleConnTimeout: 90 * time.Second, DisableCompression: true}
	log.Fatal(http.ListenAndServe(addr, rp))
}

// upstream answers a small body at once, or holds /block requests until released. /sse is
// one event, flushed; /bulk 100 MiB in 32 KiB chunks without a length; /idle one event, then
// nothing until released.
type upstream struct {
	blocked atomic.Int64
	release chan struct{}
}

// bulkSize is the streamed answer of /bulk.
const bulkSize = 100 << 20

var chunk = make([]byte, 32<<10)

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case strings.HasSuffix(r.URL.Path, "/block"):
		u.blocked.Add(1)
		<-u.release
	case strings.HasSuffix(r.URL.Path, "/sse"), strings.HasSuffix(r.URL.Path, "/idle"):
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		if strings.HasSuffix(r.URL.Path, "/idle") {
			u.blocked.Add(1)
			select {
			case <-u.release:
			case <-r.Context().Done():
			}
		}
		return
	case strings.HasSuffix(r.URL.Path, "/bulk"):
		for sent := 0; sent < bulkSize; sent += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"ok":true}`)
}

func run() error {
	env, err := testenv.Start()
	if err != nil {
		return err
	}
	defer env.Stop()
	work, err := os.MkdirTemp("", "sless-gateway-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	up := &upstream{release: make(chan struct{})}
	upURL := serve(up)
	bin := *slessBin
	if bin == "" {
		bin = filepath.Join(work, "sless")
		if out, err := exec.Command("go", "build", "-o", bin, "./cmd/sless").CombinedOutput(); err != nil {
			return fmt.Errorf("go build ./cmd/sless: %v\n%s", err, out)
		}
	}
	kubeconfig := filepath.Join(work, "kubeconfig")
	if err := testenv.WriteKubeconfig(env.Config, kubeconfig); err != nil {
		return err
	}
	dbURL, dropDB, err := createDatabase(*postgres)
	if err != nil {
		return err
	}
	defer dropDB()

	gwAddr, bareAddr := freeAddr(), freeAddr()
	history := dbURL
	if !*withHistory {
		history = ""
	}
	gw := exec.Command(bin, "gateway", "--listen", gwAddr, "--interceptor-url", upURL, "--database-url", history,
		"--artifacts-dir", filepath.Join(work, "artifacts"), "--log-level", "warn", "--max-held-per-function", strconv.Itoa(*held+100), "--max-held", strconv.Itoa(*held+100),
		"--max-requests-per-client", strconv.Itoa(*held+100)) // every caller is the bench, one address
	gw.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "SLESS_JWT_HMAC_KEY="+hmacKey)
	gw.Stderr = os.Stderr
	self, _ := os.Executable()
	bp := exec.Command(self, "-bare", bareAddr, "-bare-target", upURL)
	bp.Stderr = os.Stderr
	for _, c := range []*exec.Cmd{gw, bp} {
		if err := c.Start(); err != nil {
			return err
		}
		defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	}
	gwBase := "http://" + gwAddr
	waitHTTP(gwBase + "/healthz")
	waitHTTP("http://" + bareAddr + "/")
	fnURL, err := deploy(env, gwBase)
	if err != nil {
		return err
	}
	waitHTTP(fnURL)

	targets := []struct{ name, url string }{{"gateway", fnURL}, {"bare", "http://" + bareAddr}, {"direct", upURL}}
	if *streams {
		return measureStreams(up, gw.Process.Pid, targets)
	}
	for i := range targets {
		targets[i].url += "/x"
	}
	results := map[string][]result{}
	load(targets[0].url, *requests/4) // warm-up: connections, caches
	load(targets[1].url, *requests/4)
	for range *rounds {
		for _, t := range targets {
			results[t.name] = append(results[t.name], load(t.url, *requests))
		}
	}
	gwRSS := vm(gw.Process.Pid, "VmHWM")
	gwHeld := heldMemory(up, gw.Process.Pid, fnURL+"/block")
	bareHeld := heldMemory(up, bp.Process.Pid, "http://"+bareAddr+"/block")

	g, b, d := median(results["gateway"]), median(results["bare"]), median(results["direct"])
	fmt.Printf("requests/round %d, concurrency %d, rounds %d (medians)\n", *requests, *concurrency, *rounds)
	for _, r := range []struct {
		name string
		res  result
	}{{"gateway /fn/", g}, {"bare ReverseProxy", b}, {"direct upstream", d}} {
		fmt.Printf("  %-18s %9.0f req/s   p50 %7.3f ms   p99 %7.3f ms\n", r.name, r.res.rps, ms(r.res.p50), ms(r.res.p99))
	}
	fmt.Printf("throughput ratio gateway/bare: %.2f (target >= 0.9)\n", g.rps/b.rps)
	fmt.Printf("p50 added over bare proxy: %.3f ms (target <= 0.3 ms)\n", ms(g.p50-b.p50))
	fmt.Printf("gateway peak RSS under load: %.1f MB (target <= 100 MB)\n", float64(gwRSS)/(1<<20))
	fmt.Printf("memory per held request: gateway %.1f KiB, bare %.1f KiB (%d held)\n", float64(gwHeld)/1024, float64(bareHeld)/1024, *held)
	return nil
}

type result struct {
	rps      float64
	p50, p99 time.Duration
}

// load sends n GETs over *concurrency keep-alive connections and measures them.
func load(u string, n int) result { return loadAt(u, n, *concurrency) }

// loadAt sends n GETs over concurrency keep-alive connections and measures them.
func loadAt(u string, n, concurrency int) result {
	tr := &http.Transport{MaxIdleConnsPerHost: concurrency, MaxConnsPerHost: concurrency}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var next atomic.Int64
	lat := make([][]time.Duration, concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				t0 := time.Now()
				resp, err := hc.Get(u)
				if err != nil {
					log.Fatalf("GET %s: %v", u, err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					log.Fatalf("GET %s: %d", u, resp.StatusCode)
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	all := slices.Concat(lat...)
	slices.Sort(all)
	return result{rps: float64(n) / elapsed.Seconds(), p50: all[len(all)/2], p99: all[len(all)*99/100]}
}

// heldMemory holds *held requests at the upstream through a proxy and returns the growth of
// the proxy's resident set per held request.
func heldMemory(up *upstream, pid int, u string) int64 {
	var before, during int64
	hold(up, u, *held, func() { before = vm(pid, "VmRSS") }, func() { during = vm(pid, "VmRSS") })
	return (during - before) / int64(*held)
}

// hold sends n GETs of u that the upstream holds (/block, /idle); it runs before first,
// while once all n are held, then releases them and waits for their ends.
func hold(up *upstream, u string, n int, before, while func()) {
	up.release = make(chan struct{})
	up.blocked.Store(0)
	before()
	tr := &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: 0}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := hc.Get(u)
			if err != nil {
				log.Printf("held GET %s: %v", u, err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	for up.blocked.Load() < int64(n) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	while()
	close(up.release)
	wg.Wait()
}

// median takes the median of each measure across rounds independently.
func median(rs []result) result {
	pick := func(f func(result) float64) float64 {
		vs := make([]float64, len(rs))
		for i, r := range rs {
			vs[i] = f(r)
		}
		slices.Sort(vs)
		return vs[len(vs)/2]
	}
	return result{
		rps: pick(func(r result) float64 { return r.rps }),
		p50: time.Duration(pick(func(r result) float64 { return float64(r.p50) })),
		p99: time.Duration(pick(func(r result) float64 { return float64(r.p99) })),
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// vm reads a VmXXX line of /proc/<pid>/status in bytes.
func vm(pid int, field string) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		log.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	log.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// deploy creates a function through the gateway's API and writes the status the operator
// would, returning its /fn/ URL.
func deploy(env *testenv.Env, base string) (string, error) {
	sub := "bench-" + randomHex()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{Subject: sub, ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}).SignedString([]byte(hmacKey))
	if err != nil {
		return "", err
	}
	c, err := gwclient.New(base, tok, nil)
	if err != nil {
		return "", err
	}
	ns := api.TenantNamespace(sub)
	ctx := context.Background()
	rt := "go1.23"
	if _, err := c.CreateFunction(ctx, ns, api.CreateFunction{Name: "bench", FunctionFields: api.FunctionFields{Runtime: &rt}}); err != nil {
		return "", err
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var fn v1alpha1.Function
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "bench"}, &fn); err != nil {
			return err
		}
		fn.Status.Phase, fn.Status.RoutingHost, fn.Status.ObservedGeneration = v1alpha1.FunctionReady, "bench."+ns+".fn.sless.bench", fn.Generation
		return env.Client.Status().Update(ctx, &fn)
	})
	return base + "/fn/" + ns + "/bench", err
}

func createDatabase(admin string) (string, func(), error) {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", nil, fmt.Errorf("connect to PostgreSQL (-postgres-url): %w", err)
	}
	defer c.Close(ctx)
	name := "sless_gateway_bench_" + randomHex()
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, err
	}
	u, _ := url.Parse(admin)
	u.Path = "/" + name
	return u.String(), func() {
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)")
	}, nil
}

func serve(h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = http.Serve(ln, h) }()
	return "http://" + ln.Addr().String()
}

func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitHTTP(u string) {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(u)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	log.Fatalf("%s did not answer 200 within 60s", u)
}

func randomHex() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
