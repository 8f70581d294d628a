package amqpsource_test

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
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"sless.dev/sless/dispatcher"
	"sless.dev/sless/test/bench/baseline"
	"sless.dev/sless/test/testkit"
	"sless.dev/sless/triggers/rabbitmq/amqpsource"
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
	cfg := amqpsource.Config{
		URL: testkit.AMQPURL(b), Queue: q, Config: dispatcher.Config{Function: dispatcher.FunctionRef{Namespace: "bench", Name: "fn"},
			Concurrency: 16, ExitWhenEmpty: true, IdleTimeout: 200 * time.Millisecond, Invoker: inv,
			Logger: slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))},
	}
	measure(b, func() {
		st, err := amqpsource.Run(context.Background(), cfg)
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
	ch := channel(b, dial(b))
	measure(b, func() {
		if err := baseline.BarePost(ch, q, target, b.N, 16); err != nil {
			b.Fatal(err)
		}
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
	q := newQueue(b)
	ch := channel(b, dial(b))
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		b.Fatal(err)
	}
	if err := baseline.Fill(ch, q, b.N); err != nil {
		b.Fatal(err)
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
