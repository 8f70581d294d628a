package buildkit

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sless.dev/sless/test/testkit"
)

// benchZip is a ~20 MiB source upload: text files that compress like code plus some
// incompressible assets.
func benchZip(b *testing.B) []byte {
	b.Helper()
	words := [][]byte{[]byte("func "), []byte("return "), []byte("event"), []byte(" := "), []byte("if err != nil {\n"), []byte("}\n"), []byte("map[string]interface{}"), []byte("handler"), []byte("\t"), []byte("fmt.Sprintf(\"%s\", name)\n")}
	rnd := randomBytes(64 << 20)
	var entries []zipEntry
	entries = append(entries, file("handler.py", "def handle(e):\n    return e\n"))
	for i := 0; i < 160; i++ { // ~40 MiB of text, ~4:1
		var buf bytes.Buffer
		for j := 0; buf.Len() < 256<<10; j++ {
			buf.Write(words[int(rnd[(i*4096+j)%len(rnd)])%len(words)])
			buf.WriteString(strconv.Itoa(int(rnd[(i*977+j)%len(rnd)])))
		}
		entries = append(entries, zipEntry{name: fmt.Sprintf("src/pkg%02d/file%03d.py", i%16, i), body: buf.Bytes()})
	}
	for i := 0; i < 12; i++ { // 12 MiB of assets
		entries = append(entries, zipEntry{name: fmt.Sprintf("assets/blob%d.bin", i), body: rnd[i<<20 : (i+1)<<20]})
	}
	return makeZip(b, entries...)
}

// BenchmarkPrepareContext: validation plus build context generation for a 20 MiB upload.
func BenchmarkPrepareContext(b *testing.B) {
	data := benchZip(b)
	b.SetBytes(int64(len(data)))
	defer reportCPU(b)()
	for i := 0; i < b.N; i++ {
		src, err := ValidateBytes(context.Background(), data, "python3.11", "", DefaultLimits())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := NewBuildContext(context.Background(), src); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUnzipTarBaseline: the same bytes copied from the zip into a tar.gz (same gzip
// level) with no validation, ordering, hashing or generated files.
func BenchmarkUnzipTarBaseline(b *testing.B) {
	data := benchZip(b)
	b.SetBytes(int64(len(data)))
	defer reportCPU(b)()
	for i := 0; i < b.N; i++ {
		zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			b.Fatal(err)
		}
		var out bytes.Buffer
		gz, _ := gzip.NewWriterLevel(&out, contextGzipLevel)
		tw := tar.NewWriter(gz)
		for _, f := range zr.File {
			if err := tw.WriteHeader(&tar.Header{Name: f.Name, Mode: 0o644, Size: int64(f.UncompressedSize64)}); err != nil {
				b.Fatal(err)
			}
			rc, err := f.Open()
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.Copy(tw, rc); err != nil {
				b.Fatal(err)
			}
			rc.Close()
		}
		tw.Close()
		gz.Close()
	}
}

// BenchmarkWrapper measures warm invocations through each runtime's wrapper and through a
// bare server in the same language answering the same JSON (test/bench/buildkit/). With
// SLESS_BENCH_ROUNDS=n every variant runs n times, interleaved, so that load from other
// processes hits wrapper and baseline alike (test/bench/buildkit-wrappers.sh).
func BenchmarkWrapper(b *testing.B) {
	goBare := filepath.Join(b.TempDir(), "bare")
	if out, err := exec.Command("go", "build", "-o", goBare, "../test/bench/buildkit/bare").CombinedOutput(); err != nil {
		b.Fatalf("building the bare Go server: %v\n%s", err, out)
	}
	type variant struct {
		name     string
		cmd, env []string
	}
	var variants []variant
	for _, lang := range []struct{ name, runtime string }{{"go", "go1.23"}, {"python", "python3.11"}, {"node", "nodejs20"}} {
		bc := buildContext(b, zipDir(b, "testdata/bench/"+lang.name), lang.runtime, "")
		art, err := LocalBuild(context.Background(), bc.Data, lang.runtime, filepath.Join(b.TempDir(), lang.name))
		if err != nil {
			b.Fatal(err)
		}
		for _, timeout := range []string{"0", "30"} {
			variants = append(variants, variant{lang.name + "/wrapper/timeout=" + timeout, art.Command, append(art.Env, "SLESS_TIMEOUT_SECONDS="+timeout)})
		}
		bare := map[string][]string{"go": {goBare}, "python": {"python3", "../test/bench/buildkit/bare.py"}, "node": {"node", "../test/bench/buildkit/bare.js"}}
		variants = append(variants, variant{lang.name + "/bare", bare[lang.name], nil})
	}
	rounds, _ := strconv.Atoi(os.Getenv("SLESS_BENCH_ROUNDS"))
	for round := 0; round < max(rounds, 1); round++ {
		for _, v := range variants {
			b.Run(v.name, func(b *testing.B) { loadTest(b, v.cmd, v.env) })
		}
	}
}

// loadTest starts a server and sends b.N POSTs over keep-alive connections from
// 2×GOMAXPROCS goroutines.
func loadTest(b *testing.B, command, env []string) {
	port := testkit.FreePort(b)
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env = append(append(os.Environ(), env...), "PORT="+strconv.Itoa(port), "SLESS_HOST=127.0.0.1")
	if err := cmd.Start(); err != nil { // stdout/stderr to /dev/null: logging stays on, unread
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	url := fmt.Sprintf("http://127.0.0.1:%d/bench", port)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	body := []byte(`{"name":"bench"}`)
	post := func() error {
		req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Traceparent", traceparent) // the gateway always sends one: logging is measured
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(out) != `{"message":"hello, bench"}` {
			return fmt.Errorf("%d %s", resp.StatusCode, out)
		}
		return nil
	}
	deadline := time.Now().Add(15 * time.Second)
	for post() != nil {
		if time.Now().After(deadline) {
			b.Fatalf("%v never answered", command)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.SetParallelism(2)
	cpu0 := processCPU(b, cmd.Process.Pid)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := post(); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(processCPU(b, cmd.Process.Pid)-cpu0)/float64(b.N), "server-cpu-ns/op")
}

// processCPU is the user+system CPU time a process has used so far (/proc/PID/stat), which
// other processes on a busy machine do not inflate, unlike wall time.
func processCPU(b *testing.B, pid int) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64) // fields 14 and 15 of proc(5)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

// reportCPU resets the timer and, when called back at the end, reports this process's CPU
// time per operation next to the wall time.
func reportCPU(b *testing.B) func() {
	start := selfCPU()
	b.ResetTimer()
	return func() {
		b.StopTimer()
		b.ReportMetric(float64(selfCPU()-start)/float64(b.N), "cpu-ns/op")
	}
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
