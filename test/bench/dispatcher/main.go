// Command dispatcher benchmarks `sless dispatcher` against the least a dispatcher must do —
// a bare amqp091-go consumer that POSTs each message to the same function with net/http and
// acks it after the 2xx, with the same prefetch and as many workers — and, for reference,
// against a consume+ack loop that calls nothing, on the same RabbitMQ and queue size, in
// one run:
//
//	go run ./test/bench/dispatcher -messages 20000 -concurrency 16 -rounds 3
//
// With -database-url it also runs the dispatcher recording history, and drains as many
// asynchronous invocations (Prefer: respond-async: each a record in PostgreSQL, queued by
// the gateway's Publisher beforehand) with `sless dispatcher --async`: the ratio against
// the event path recording history is the cost of keeping each invocation's record.
//
// Throughput: a queue filled with -messages is drained by each consumer, alternating per
// round; the rate counts from the first to the last message handled (startup and the idle
// exit are excluded). Latency: messages published at -rate/s, measured from publish to the
// function (dispatcher, bare POST loop) or to the delivery (consume-only loop). RSS: the
// dispatcher process's peak resident set (VmHWM).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"sless.dev/sless/history"
	"sless.dev/sless/rules"
	"sless.dev/sless/test/bench/baseline"
	"sless.dev/sless/triggers/rabbitmq/amqpsource"
)

var (
	amqpURL     = flag.String("amqp-url", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ to benchmark against")
	messages    = flag.Int("messages", 20000, "queue size for the throughput runs")
	concurrency = flag.Int("concurrency", 16, "prefetch of both consumers (the dispatcher's --concurrency)")
	rate        = flag.Int("rate", 500, "publish rate of the latency runs, messages/s")
	latencyN    = flag.Int("latency-messages", 3000, "messages of each latency run")
	slessBin    = flag.String("sless", "", "sless binary (default: built from ./cmd/sless)")
	databaseURL = flag.String("database-url", "", "also run the dispatcher recording history to this PostgreSQL")
	rounds      = flag.Int("rounds", 3, "alternating bare/dispatcher throughput rounds")
	// The baseline runs as a child process of its own, so its CPU is counted as the
	// dispatcher's is.
	childQueue  = flag.String("child-bare-post", "", "internal: run the baseline consumer on this queue and exit")
	childN      = flag.Int("child-messages", 0, "internal: messages the child consumes")
	childTarget = flag.String("child-target", "", "internal: the function URL the child posts to")
)

func main() {
	flag.Parse()
	log.SetFlags(0)
	if *childQueue != "" {
		_, ch := connect()
		must(baseline.BarePost(ch, *childQueue, *childTarget, *childN, *concurrency))
		return
	}
	bin := *slessBin
	if bin == "" {
		bin = buildSless()
	}
	fn := newFunction()
	defer fn.srv.Close()

	// Rounds alternate the three consumers on fresh queues so all see the same background
	// load; the median of the per-round ratios is the headline figure.
	var ratios, refRatios []float64
	var bare, post, disp, hist, async []result
	for range *rounds {
		b := bareThroughput()
		p := barePostThroughput(fn)
		d := dispatcherThroughput(bin, fn, "")
		bare, post, disp = append(bare, b), append(post, p), append(disp, d)
		ratios, refRatios = append(ratios, d.rate/p.rate), append(refRatios, d.rate/b.rate)
		if *databaseURL != "" {
			hist = append(hist, dispatcherThroughput(bin, fn, *databaseURL))
			async = append(async, asyncThroughput(bin, fn, *databaseURL))
		}
	}
	bareLat := bareLatency()
	postLat := barePostLatency(fn)
	dispLat := dispatcherLatency(bin, fn)

	fmt.Printf("\nmessages=%d concurrency=%d rounds=%d; latency: %d msgs at %d/s\n\n", *messages, *concurrency, *rounds, *latencyN, *rate)
	fmt.Println("| round | consumer | messages/s | ratio vs consume+POST+ack | consumer CPU/msg | peak RSS (anon) |")
	fmt.Println("|---|---|---|---|---|---|")
	for i := range bare {
		fmt.Printf("| %d | bare consume+ack, no call (reference) | %.0f | %.2f | %s | – |\n", i+1, bare[i].rate, bare[i].rate/post[i].rate, us(bare[i].cpuMsg))
		fmt.Printf("| %d | bare consume + net/http POST + ack (baseline) | %.0f | 1.00 | %s | – |\n", i+1, post[i].rate, us(post[i].cpuMsg))
		fmt.Printf("| %d | sless dispatcher → HTTP function | %.0f | %.2f | %s | %.1f MB (%.1f MB) |\n", i+1, disp[i].rate, ratios[i], us(disp[i].cpuMsg), disp[i].rssMB, disp[i].anonMB)
		if hist != nil {
			h := hist[i]
			fmt.Printf("| %d | sless dispatcher + PostgreSQL history | %.0f | %.2f | %s | %.1f MB (%.1f MB) |\n", i+1, h.rate, h.rate/post[i].rate, us(h.cpuMsg), h.rssMB, h.anonMB)
			a := async[i]
			fmt.Printf("| %d | sless dispatcher --async (records + history) | %.0f | %.2f (%.2f vs the event path with history) | %s | %.1f MB (%.1f MB) |\n",
				i+1, a.rate, a.rate/post[i].rate, a.rate/h.rate, us(a.cpuMsg), a.rssMB, a.anonMB)
		}
	}
	fmt.Printf("\nmedian ratio vs the baseline %.2f (vs consume-only %.2f); median CPU/msg baseline %s, dispatcher %s\n", median(ratios), median(refRatios),
		us(time.Duration(median(cpuOf(post)))), us(time.Duration(median(cpuOf(disp)))))
	fmt.Printf("latency publish→handler: consume-only p50 %s p99 %s; baseline p50 %s p99 %s; dispatcher p50 %s p99 %s\n",
		ms(bareLat.p50), ms(bareLat.p99), ms(postLat.p50), ms(postLat.p99), ms(dispLat.p50), ms(dispLat.p99))
}

func cpuOf(rs []result) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = float64(r.cpuMsg)
	}
	return out
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

type result struct {
	rate   float64
	rssMB  float64       // peak resident set (VmHWM)
	anonMB float64       // peak anonymous resident memory: the process's own heap and stacks
	cpuMsg time.Duration // consumer CPU (user+system) per message
}

type latency struct{ p50, p99 time.Duration }

func us(d time.Duration) string { return fmt.Sprintf("%.1f µs", float64(d.Nanoseconds())/1000) }

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

func buildSless() string {
	dir, err := os.MkdirTemp("", "sless-bench")
	must(err)
	built := filepath.Join(dir, "sless.built")
	cmd := exec.Command("go", "build", "-o", built, "./cmd/sless")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // as `make build` and the image build it
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	must(cmd.Run())
	// Installed by plain writes, as an image layer or `install` would: the linker writes its
	// output through mmap, which leaves the page cache holding large folios that the kernel
	// maps whole on the first touch, adding about 6 MB of file-backed RSS that a deployed
	// binary does not have (measured: 47-48 MB idle as linked, 41-43 MB as copied).
	bin := filepath.Join(dir, "sless")
	in, err := os.Open(built)
	must(err)
	defer in.Close()
	out, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	must(err)
	_, err = io.Copy(out, in)
	must(err)
	must(out.Close())
	return bin
}

// function is the trivial local function: it answers 200 and notes when each message arrived.
type function struct {
	srv   *http.Server
	url   string
	mu    sync.Mutex
	first time.Time
	last  time.Time
	count int
	lat   []time.Duration
}

func newFunction() *function {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(err)
	f := &function{url: "http://" + ln.Addr().String() + "/"}
	f.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		now := time.Now()
		sent, _ := strconv.ParseInt(r.Header.Get("X-Amqp-Header-Sent-Ns"), 10, 64)
		f.mu.Lock()
		if f.count == 0 {
			f.first = now
		}
		f.last = now
		f.count++
		if sent > 0 {
			f.lat = append(f.lat, now.Sub(time.Unix(0, sent)))
		}
		f.mu.Unlock()
		_, _ = w.Write([]byte(`{}`))
	})}
	go func() { _ = f.srv.Serve(ln) }()
	return f
}

func (f *function) reset() {
	f.mu.Lock()
	f.first, f.last, f.count, f.lat = time.Time{}, time.Time{}, 0, nil
	f.mu.Unlock()
}

func newQueue(ch *amqp.Channel) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	q := "sless-bench-" + hex.EncodeToString(b)
	_, err := ch.QueueDeclare(q, true, false, false, false, nil)
	must(err)
	_, err = ch.QueueDeclare(q+".dlq", true, false, false, false, nil)
	must(err)
	return q
}

func deleteQueue(ch *amqp.Channel, q string) {
	_, _ = ch.QueueDelete(q, false, false, false)
	_, _ = ch.QueueDelete(q+".dlq", false, false, false)
}

func connect() (*amqp.Connection, *amqp.Channel) {
	conn, err := amqp.Dial(*amqpURL)
	must(err)
	ch, err := conn.Channel()
	must(err)
	return conn, ch
}

// fill publishes n persistent messages with confirms.
func fill(ch *amqp.Channel, q string, n int) { must(baseline.Fill(ch, q, n)) }

// publishAtRate publishes n messages at *rate per second, stamping the send time in a header.
func publishAtRate(ch *amqp.Channel, q string, n int) {
	tick := time.NewTicker(time.Second / time.Duration(*rate))
	defer tick.Stop()
	for i := range n {
		<-tick.C
		must(ch.PublishWithContext(context.Background(), "", q, false, false, amqp.Publishing{
			ContentType: "application/json", MessageId: strconv.Itoa(i), Body: []byte(`{"latency":true}`),
			Headers: amqp.Table{baseline.SentHeader: strconv.FormatInt(time.Now().UnixNano(), 10)},
		}))
	}
}

// bareConsume is the baseline: one goroutine consuming with the same prefetch and acking
// each delivery. It returns the first and last delivery times and per-message latencies.
func bareConsume(ch *amqp.Channel, q string, n int) (time.Time, time.Time, []time.Duration) {
	must(ch.Qos(*concurrency, 0, false))
	ds, err := ch.Consume(q, "bare", false, false, false, false, nil)
	must(err)
	var first, last time.Time
	var lat []time.Duration
	for i := 0; i < n; i++ {
		d := <-ds
		now := time.Now()
		if i == 0 {
			first = now
		}
		if s, ok := d.Headers[baseline.SentHeader].(string); ok {
			sent, _ := strconv.ParseInt(s, 10, 64)
			lat = append(lat, now.Sub(time.Unix(0, sent)))
		}
		must(d.Ack(false))
		last = time.Now()
	}
	must(ch.Cancel("bare", false))
	return first, last, lat
}

func bareThroughput() result {
	q, done := filledQueue()
	defer done()
	_, cch := connect()
	before := cpuSelf()
	first, last, _ := bareConsume(cch, q, *messages)
	return result{rate: float64(*messages-1) / last.Sub(first).Seconds(), cpuMsg: (cpuSelf() - before) / time.Duration(*messages)}
}

// startBarePost runs the baseline consumer as a child process of this binary on q.
func startBarePost(q string, n int, fn *function) (wait func() time.Duration) {
	self, err := os.Executable()
	must(err)
	cmd := exec.Command(self, "-amqp-url", *amqpURL, "-concurrency", strconv.Itoa(*concurrency),
		"-child-bare-post", q, "-child-messages", strconv.Itoa(n), "-child-target", fn.url)
	cmd.Stderr = os.Stderr
	must(cmd.Start())
	return func() time.Duration {
		if err := cmd.Wait(); err != nil {
			log.Fatalf("baseline consumer: %v", err)
		}
		return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
}

// filledQueue is a fresh queue holding -messages messages; done deletes it.
func filledQueue() (q string, done func()) {
	conn, ch := connect()
	q = newQueue(ch)
	fill(ch, q, *messages)
	return q, func() { deleteQueue(ch, q); conn.Close() }
}

func barePostThroughput(fn *function) result {
	q, done := filledQueue()
	defer done()
	fn.reset()
	cpu := startBarePost(q, *messages, fn)()
	fn.mu.Lock()
	defer fn.mu.Unlock()
	return result{rate: float64(fn.count-1) / fn.last.Sub(fn.first).Seconds(), cpuMsg: cpu / time.Duration(*messages)}
}

// latencyOf publishes *latencyN messages at a steady rate into a fresh queue that start's
// consumer (started first, so it is consuming before the clock starts) delivers to fn, and
// returns the percentiles fn measured.
func latencyOf(fn *function, start func(q string) (wait func())) latency {
	conn, ch := connect()
	defer conn.Close()
	q := newQueue(ch)
	defer deleteQueue(ch, q)
	fn.reset()
	wait := start(q)
	time.Sleep(500 * time.Millisecond)
	publishAtRate(ch, q, *latencyN)
	wait()
	fn.mu.Lock()
	defer fn.mu.Unlock()
	return percentiles(fn.lat)
}

func barePostLatency(fn *function) latency {
	return latencyOf(fn, func(q string) func() {
		wait := startBarePost(q, *latencyN, fn)
		return func() { wait() }
	})
}

func bareLatency() latency {
	conn, ch := connect()
	defer conn.Close()
	q := newQueue(ch)
	defer deleteQueue(ch, q)
	_, cch := connect()
	var lat []time.Duration
	done := make(chan struct{})
	go func() { _, _, lat = bareConsume(cch, q, *latencyN); close(done) }()
	publishAtRate(ch, q, *latencyN)
	<-done
	return percentiles(lat)
}

// startDispatcher runs `sless dispatcher` on q and samples its peak RSS until it exits.
func startDispatcher(bin, q string, fn *function, databaseURL string, extra ...string) (wait func() (rssMB, anonMB float64, cpu time.Duration)) {
	args := append([]string{"dispatcher", "--amqp-url", *amqpURL, "--queue", q, "--function", "bench/fn",
		"--target-url", fn.url, "--concurrency", strconv.Itoa(*concurrency)}, extra...)
	if databaseURL != "" {
		args = append(args, "--database-url", databaseURL)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = io.Discard
	must(cmd.Start())
	var mu sync.Mutex
	var peak, anon float64
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
				st := procStatus(cmd.Process.Pid)
				mu.Lock()
				peak, anon = max(peak, st["VmHWM"]), max(anon, st["RssAnon"])
				mu.Unlock()
			}
		}
	}()
	return func() (float64, float64, time.Duration) {
		if err := cmd.Wait(); err != nil {
			log.Fatalf("sless dispatcher: %v", err)
		}
		close(done)
		mu.Lock()
		defer mu.Unlock()
		return peak, anon, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
}

func dispatcherThroughput(bin string, fn *function, databaseURL string) result {
	q, done := filledQueue()
	defer done()
	fn.reset()
	rss, anon, cpu := startDispatcher(bin, q, fn, databaseURL, "--exit-when-empty", "--idle-timeout", "1s")()
	fn.mu.Lock()
	defer fn.mu.Unlock()
	if fn.count < *messages {
		log.Fatalf("function saw %d of %d messages", fn.count, *messages)
	}
	return result{rate: float64(fn.count-1) / fn.last.Sub(fn.first).Seconds(), rssMB: rss, anonMB: anon, cpuMsg: cpu / time.Duration(*messages)}
}

// asyncThroughput queues -messages asynchronous invocations as the gateway does (a record,
// then a confirmed publish) and times `sless dispatcher --async` draining them; it checks
// every record ended succeeded.
func asyncThroughput(bin string, fn *function, databaseURL string) result {
	ctx := context.Background()
	store, err := history.OpenPostgres(databaseURL, history.PostgresOptions{})
	must(err)
	defer func() { _ = store.Close(ctx) }()
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	ns, name := "bench-"+hex.EncodeToString(suffix), "fn"
	q := rules.AsyncQueue(ns, name)
	conn, ch := connect()
	defer conn.Close()
	defer deleteQueue(ch, q)
	pub := &amqpsource.Publisher{URL: *amqpURL, AsyncStore: store, Logger: slog.New(slog.DiscardHandler)}
	defer pub.Close()
	ids := make([]string, *messages)
	var wg sync.WaitGroup
	next := make(chan int)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				inv, _, err := pub.Enqueue(ctx, history.AsyncRequest{Namespace: ns, Function: name, Method: http.MethodPost, Path: "/",
					Header: map[string][]string{"Content-Type": {"application/json"}}, MaxAttempts: 3,
					Body: []byte(fmt.Sprintf(`{"order":%d,"item":"bench","qty":1}`, i))})
				must(err)
				ids[i] = inv.ID
			}
		}()
	}
	for i := range *messages {
		next <- i
	}
	close(next)
	wg.Wait()
	fn.reset()
	rss, anon, cpu := startDispatcher(bin, q, fn, databaseURL, "--async", "--function", ns+"/"+name, "--exit-when-empty", "--idle-timeout", "1s")()
	for _, id := range ids {
		inv, err := store.GetAsync(ctx, ns, id)
		must(err)
		if inv.Status != history.AsyncSucceeded {
			log.Fatalf("asynchronous invocation %s ended %s: %s", id, inv.Status, inv.Error)
		}
	}
	fn.mu.Lock()
	defer fn.mu.Unlock()
	return result{rate: float64(fn.count-1) / fn.last.Sub(fn.first).Seconds(), rssMB: rss, anonMB: anon, cpuMsg: cpu / time.Duration(*messages)}
}

func dispatcherLatency(bin string, fn *function) latency {
	return latencyOf(fn, func(q string) func() {
		wait := startDispatcher(bin, q, fn, "", "--max-messages", strconv.Itoa(*latencyN))
		return func() { wait() }
	})
}

func percentiles(d []time.Duration) latency {
	if len(d) == 0 {
		log.Fatal("no latency samples")
	}
	slices.Sort(d)
	at := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
	return latency{p50: at(0.50), p99: at(0.99)}
}

// cpuSelf is this process's CPU time so far (user+system).
func cpuSelf() time.Duration {
	var ru syscall.Rusage
	must(syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procStatus reads the kB fields of /proc/<pid>/status in MB (empty once the process exited).
func procStatus(pid int) map[string]float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if v, isKB := strings.CutSuffix(strings.TrimSpace(v), " kB"); ok && isKB {
			kb, _ := strconv.ParseFloat(v, 64)
			out[k] = kb / 1024
		}
	}
	return out
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
