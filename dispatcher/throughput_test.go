package dispatcher_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"sless.dev/sless/dispatcher"
)

// serveFunction is the child process of the throughput benchmarks: the trivial function of
// test/bench/dispatcher (200 {}), out of the benchmark's process so that a CPU profile shows
// the consumer alone.
func serveFunction() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("http://" + ln.Addr().String() + "/")
	_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte(`{}`))
	}))
	return 0
}

// BenchmarkRun drains b.N messages through Run → net/http → ack as `sless dispatcher` runs it
// (the SDK tracer provider without an exporter, a JSON logger at info), against the real
// broker and a function in a child process. It reports the process's CPU per message; with
// SLESS_BENCH_CPUPROFILE=<file> it writes a CPU profile of the drain alone (not the fill):
//
//	go test ./dispatcher/ -run '^$' -bench 'Run|BarePost' -benchtime 20000x
func BenchmarkRun(b *testing.B) {
	target, q := throughputSetup(b)
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample()))))
	b.Cleanup(func() { otel.SetTracerProvider(prev) })
	inv, err := dispatcher.NewHTTPInvoker(target, "", 16)
	if err != nil {
		b.Fatal(err)
	}
	cfg := dispatcher.Config{
		URL: amqpURL(), Queue: q, Function: dispatcher.FunctionRef{Namespace: "bench", Name: "fn"},
		Concurrency: 16, ExitWhenEmpty: true, IdleTimeout: 200 * time.Millisecond, Invoker: inv,
		Logger: slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	measure(b, func() {
		st, err := dispatcher.Run(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		if st.Acked != int64(b.N) {
			b.Fatalf("acked %d of %d", st.Acked, b.N)
		}
	})
}

// BenchmarkBarePost is the reference of BenchmarkRun, test/bench/dispatcher's baseline:
// consume with the same prefetch, POST with net/http from as many workers, ack each.
func BenchmarkBarePost(b *testing.B) {
	target, q := throughputSetup(b)
	conn, err := amqp.Dial(amqpURL())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := ch.Qos(16, 0, false); err != nil {
		b.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true}}
	measure(b, func() {
		ds, err := ch.Consume(q, "bare-post", false, false, false, false, nil)
		if err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		left := b.N
		for range 16 {
			wg.Go(func() {
				for {
					mu.Lock()
					if left == 0 {
						mu.Unlock()
						return
					}
					left--
					mu.Unlock()
					d := <-ds
					req, err := http.NewRequest(http.MethodPost, target, strings.NewReader(string(d.Body)))
					if err != nil {
						panic(err)
					}
					req.Header.Set("Content-Type", d.ContentType)
					resp, err := client.Do(req)
					if err != nil {
						panic(err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err := d.Ack(false); err != nil {
						panic(err)
					}
				}
			})
		}
		wg.Wait()
		_ = ch.Cancel("bare-post", false)
	})
}

// throughputSetup starts the function and fills a fresh queue with b.N messages as
// test/bench/dispatcher does.
func throughputSetup(b *testing.B) (target, queue string) {
	fn := exec.Command(os.Args[0])
	fn.Env = append(os.Environ(), "SLESS_TEST_FUNCTION_SERVER=1")
	out, err := fn.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := fn.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = fn.Process.Kill(); _ = fn.Wait() })
	target, err = bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	conn, err := amqp.Dial(amqpURL())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	q := fmt.Sprintf("sless-bench-%s-%d", b.Name(), time.Now().UnixNano())
	b.Cleanup(func() {
		if conn, err := amqp.Dial(amqpURL()); err == nil {
			defer conn.Close()
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(q, false, false, false)
				_, _ = ch.QueueDelete(q+".dlq", false, false, false)
			}
		}
	})
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		b.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	confirms := make([]*amqp.DeferredConfirmation, 0, b.N)
	for i := range b.N {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", q, false, false, amqp.Publishing{
			ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: fmt.Sprint(i),
			Body: []byte(fmt.Sprintf(`{"order":%d,"item":"bench","qty":1}`, i)),
		})
		if err != nil {
			b.Fatal(err)
		}
		confirms = append(confirms, dc)
	}
	for _, dc := range confirms {
		if !dc.Wait() {
			b.Fatal("publish nacked")
		}
	}
	return strings.TrimSpace(target), q
}

// measure times drain and reports the process's CPU per message, profiling it when
// SLESS_BENCH_CPUPROFILE names a file.
func measure(b *testing.B, drain func()) {
	if path := os.Getenv("SLESS_BENCH_CPUPROFILE"); path != "" && b.N > 1 {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	b.ReportAllocs()
	before := cpuTime()
	b.ResetTimer()
	drain()
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-before).Microseconds())/float64(b.N), "cpu-µs/msg")
}

// cpuTime is this process's CPU time so far (user+system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
