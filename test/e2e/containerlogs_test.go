//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
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
// real kubelet reads ("<RFC 3339 time> <stream> <F|P> <text>", P marking a partial line), so
// its container-log endpoint can filter by time and add timestamps as the real one does.
type containerLog struct {
	mu sync.Mutex
	f  *os.File
}

func (l *containerLog) stream(name string) io.Writer { return &logStream{l: l, name: name} }

type logStream struct {
	l    *containerLog
	name string
}

func (s *logStream) Write(p []byte) (int, error) {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	now := time.Now().UTC().Format(time.RFC3339Nano)
	var b bytes.Buffer
	for rest := p; len(rest) > 0; {
		line, after, full := bytes.Cut(rest, []byte("\n"))
		tag := "F"
		if !full {
			tag = "P"
		}
		fmt.Fprintf(&b, "%s %s %s %s\n", now, s.name, tag, line)
		rest = after
	}
	if _, err := s.l.f.Write(b.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// logEntry is one line of a container's output.
type logEntry struct {
	time time.Time
	text string
}

// readLogEntries parses CRI log lines from r, joining partial lines.
func readLogEntries(r io.Reader, emit func(logEntry) bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	var partial strings.Builder
	for sc.Scan() {
		ts, rest, _ := strings.Cut(sc.Text(), " ")
		_, rest, _ = strings.Cut(rest, " ") // stream
		tag, text, _ := strings.Cut(rest, " ")
		t, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			continue
		}
		partial.WriteString(text)
		if tag == "P" {
			continue
		}
		if !emit(logEntry{time: t, text: partial.String()}) {
			return
		}
		partial.Reset()
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
	readLogEntries(f, func(e logEntry) bool { b.WriteString(e.text + "\n"); return true })
	return b.Bytes()
}

// serveAPI serves the part of the kubelet API the product uses: GET
// /containerLogs/{namespace}/{pod}/{container} with follow, tailLines, sinceSeconds,
// sinceTime, timestamps, limitBytes and previous, as the API server proxies pods/log. The real
// kubelet also authenticates the API server's client certificate and authorizes with
// SubjectAccessReview; the ground's API server has no kubelet client certificate, so this one
// serves TLS without asking for one.
func (k *kubelet) serveAPI(ctx context.Context) error {
	cert, err := selfSigned(k.node, net.ParseIP(nodeIP))
	if err != nil {
		return err
	}
	ln, err := tls.Listen("tcp", net.JoinHostPort(nodeIP, strconv.Itoa(kubeletPort)), &tls.Config{Certificates: []tls.Certificate{cert}})
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
	readLogEntries(f, func(e logEntry) bool { backlog = append(backlog, e); return true })
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
			stop := false
			readLogEntries(bytes.NewReader(pending), func(e logEntry) bool { stop = !write(e); return !stop })
			pending = pending[:0]
			if stop {
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

// selfSigned is a serving certificate for the kubelet API (the API server does not verify it
// without --kubelet-certificate-authority, as on clusters whose kubelets self-sign).
func selfSigned(name string, ip net.IP) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(now.UnixNano()), Subject: pkix.Name{CommonName: name}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(24 * time.Hour), DNSNames: []string{name}, IPAddresses: []net.IP{ip},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
