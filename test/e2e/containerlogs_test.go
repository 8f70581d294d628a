//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// kubeletPort is where the kubelet serves its API (the real one's default): the API server
// proxies pods/log there, at the node's InternalIP.
const kubeletPort = 10250

// containerLog writes a container's stdout and stderr to one file in the CRI log format the
// real kubelet reads ("<RFC 3339 time> <stream> <F|P> <text>"): like containerd, each stream
// is buffered up to a newline, and a line longer than maxLogLine goes out in P(artial) pieces.
type containerLog struct {
	mu sync.Mutex
	f  *os.File
	// streams are the writers handed out, flushed when the container exits.
	streams []*logStream
}

const maxLogLine = 16 << 10

func (l *containerLog) stream(name string) io.Writer {
	s := &logStream{l: l, name: name}
	l.streams = append(l.streams, s)
	return s
}

// flush writes what a stream holds without a newline (the container has exited).
func (l *containerLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.streams {
		if len(s.pending) > 0 {
			s.emit("F", s.pending)
			s.pending = nil
		}
	}
}

type logStream struct {
	l       *containerLog
	name    string
	pending []byte
}

func (s *logStream) Write(p []byte) (int, error) {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	s.pending = append(s.pending, p...)
	for {
		line, rest, full := bytes.Cut(s.pending, []byte("\n"))
		switch {
		case full:
			s.emit("F", line)
		case len(s.pending) > maxLogLine:
			line, rest = s.pending[:maxLogLine], s.pending[maxLogLine:]
			s.emit("P", line)
		default:
			s.pending = append(s.pending[:0:0], s.pending...)
			return len(p), nil
		}
		s.pending = rest
	}
}

func (s *logStream) emit(tag string, text []byte) {
	_, _ = fmt.Fprintf(s.l.f, "%s %s %s %s\n", time.Now().UTC().Format(time.RFC3339Nano), s.name, tag, text)
}

// logEntry is one line of a container's output.
type logEntry struct {
	time time.Time
	text string
}

// logParser reads CRI log lines, joining P(artial) pieces with the line that ends them.
type logParser struct{ partial strings.Builder }

func (p *logParser) parse(raw string) (logEntry, bool) {
	ts, rest, _ := strings.Cut(raw, " ")
	_, rest, _ = strings.Cut(rest, " ") // stream
	tag, text, _ := strings.Cut(rest, " ")
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return logEntry{}, false
	}
	p.partial.WriteString(text)
	if tag == "P" {
		return logEntry{}, false
	}
	e := logEntry{time: t, text: p.partial.String()}
	p.partial.Reset()
	return e, true
}

// readLogEntries parses the CRI log lines of r.
func readLogEntries(r io.Reader, p *logParser, emit func(logEntry) bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		if e, ok := p.parse(sc.Text()); ok && !emit(e) {
			return
		}
	}
}

// logText is a container log's plain output (for termination messages).
func logText(path string) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var b bytes.Buffer
	readLogEntries(f, &logParser{}, func(e logEntry) bool { b.WriteString(e.text + "\n"); return true })
	return b.Bytes()
}

// serveAPI serves the part of the kubelet API the product uses: GET
// /containerLogs/{namespace}/{pod}/{container} with follow, tailLines, sinceSeconds,
// sinceTime, timestamps, limitBytes and previous, as the API server proxies pods/log. The real
// kubelet also authenticates the API server's client certificate and authorizes with
// SubjectAccessReview; the ground's API server has no kubelet client certificate, so this one
// serves TLS without asking for one.
func (k *kubelet) serveAPI(ctx context.Context) error {
	// The API server does not verify it without --kubelet-certificate-authority, as on
	// clusters whose kubelets serve self-made certificates.
	ca, err := newTestCA(k.node + "-ca")
	if err != nil {
		return err
	}
	crt, key, err := ca.issue(k.node, []string{k.node}, []net.IP{net.ParseIP(k.ip)})
	if err != nil {
		return err
	}
	cert, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return err
	}
	ln, err := tls.Listen("tcp", net.JoinHostPort(k.ip, strconv.Itoa(kubeletPort)), &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		return fmt.Errorf("kubelet API: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", k.containerLogs)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	return nil
}

func (k *kubelet) containerLogs(w http.ResponseWriter, r *http.Request) {
	ns, pod, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	q := r.URL.Query()
	path, err := k.logPath(ns, pod, container, q.Get("previous") == "true")
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	var since time.Time
	if s, err := strconv.Atoi(q.Get("sinceSeconds")); err == nil && s > 0 {
		since = time.Now().Add(-time.Duration(s) * time.Second)
	}
	if t, err := time.Parse(time.RFC3339, q.Get("sinceTime")); err == nil {
		since = t
	}
	tail, _ := strconv.Atoi(q.Get("tailLines"))
	if q.Get("tailLines") == "" {
		tail = -1
	}
	limit, _ := strconv.ParseInt(q.Get("limitBytes"), 10, 64)
	stamps, follow := q.Get("timestamps") == "true", q.Get("follow") == "true"
	f, err := os.Open(path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "text/plain")
	var sent int64
	write := func(e logEntry) bool {
		if e.time.Before(since) {
			return true
		}
		line := e.text + "\n"
		if stamps {
			line = e.time.Format(time.RFC3339Nano) + " " + line
		}
		if limit > 0 && sent+int64(len(line)) > limit {
			return false
		}
		n, err := io.WriteString(w, line)
		sent += int64(n)
		return err == nil
	}
	// What is there: all of it, or the last tailLines lines.
	var backlog []logEntry
	var parser logParser
	readLogEntries(f, &parser, func(e logEntry) bool { backlog = append(backlog, e); return true })
	if tail >= 0 && len(backlog) > tail {
		backlog = backlog[len(backlog)-tail:]
	}
	for _, e := range backlog {
		if !write(e) {
			return
		}
	}
	if !follow {
		return
	}
	// Follow until the container exits (its log is closed) or the client goes away.
	rd := bufio.NewReader(f)
	var pending []byte
	for {
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
		chunk, err := rd.ReadBytes('\n')
		pending = append(pending, chunk...)
		if err == nil {
			e, ok := parser.parse(strings.TrimSuffix(string(pending), "\n"))
			pending = pending[:0]
			if ok && !write(e) {
				return
			}
			continue
		}
		if !k.logOpen(path) {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// logPath finds the current (or, with previous, the last exited) log of a container.
func (k *kubelet) logPath(ns, pod, container string, previous bool) (string, error) {
	files, _ := filepath.Glob(filepath.Join(k.dir, "*", fmt.Sprintf("%s_%s_%s-*.log", ns, pod, container)))
	restart := func(p string) int {
		n, _ := strconv.Atoi(strings.TrimSuffix(p[strings.LastIndexByte(p, '-')+1:], ".log"))
		return n
	}
	slices.SortFunc(files, func(a, b string) int { return restart(a) - restart(b) })
	switch {
	case previous && len(files) >= 2:
		return files[len(files)-2], nil
	case previous:
		return "", fmt.Errorf("previous terminated container %q in pod %q not found", container, pod)
	case len(files) == 0:
		return "", fmt.Errorf("container %q in pod %q is not running", container, pod)
	}
	return files[len(files)-1], nil
}

func (k *kubelet) logOpen(path string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.openLogs[path]
}

func (k *kubelet) setLogOpen(path string, open bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if open {
		k.openLogs[path] = true
	} else {
		delete(k.openLogs, path)
	}
}

// kubeletEndpoint is the node status part that tells the API server where the kubelet is.
func kubeletEndpoint() corev1.NodeDaemonEndpoints {
	return corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: kubeletPort}}
}
