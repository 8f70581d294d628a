package local

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Connection handoff: a proxy hop costs about as much CPU as a trivial function, so after the
// gateway has routed and answered the first request of a keep-alive connection it may give
// the connection itself to a process of the function (HandOff). The wrapper then answers the
// later requests for /fn/<ns>/<name> on that connection directly and proxies any other path
// back to the gateway. The file descriptor travels over a Unix socket pair made at spawn
// (fd 3 in the child; for Node it is Node's own IPC channel, which accepts sockets as
// NODE_HANDLE messages). The wrappers report direct invocations on their log lines ("direct":
// true), which become history records (Options.OnDirect) and keep the process from looking
// idle. The full contract is in runtimes/README.md.

// ErrNoHandoff says no process of the function can take a connection now.
var ErrNoHandoff = errors.New("no process can take the connection")

// DirectInvocation is a request a process answered on a handed-off connection.
type DirectInvocation struct {
	Method, Path string
	Status       int
	Start        time.Time
	Duration     time.Duration
	Traceparent  string
	// Error is set for a request lost with its crashed process.
	Error string
}

// CanHandOff reports whether a process of key's function would take a connection now.
func (p *Pool) CanHandOff(key string) bool {
	f := p.lookup(key)
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.handoffTarget() != nil
}

// HandOff gives conn, with the bytes of its next request already read (buffered), to a
// process of key's function. conn is closed here either way: on success the process holds
// the connection, on failure the client reconnects.
func (p *Pool) HandOff(key string, conn net.Conn, buffered []byte) error {
	defer conn.Close()
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return fmt.Errorf("function %s: a %T has no file descriptor to hand off", key, conn)
	}
	f := p.lookup(key)
	if f == nil {
		return fmt.Errorf("%w: %s", ErrUnknown, key)
	}
	f.mu.Lock()
	pr := f.handoffTarget()
	if pr != nil {
		pr.conns++
	}
	f.mu.Unlock()
	if pr == nil {
		return fmt.Errorf("function %s: %w", key, ErrNoHandoff)
	}
	if err := pr.sendConn(sc, buffered); err != nil {
		f.mu.Lock()
		pr.conns--
		pr.ctlBroken = true // a partial line would corrupt the channel: no more handoffs
		f.mu.Unlock()
		return fmt.Errorf("function %s: handing off a connection to pid %d: %w", key, pr.pid(), err)
	}
	return nil
}

// handoffTarget picks the ready process with the fewest handed-off connections, below the
// concurrency target (each keep-alive client is one unit of concurrency); call with mu held.
func (f *function) handoffTarget() *process {
	var best *process
	for _, pr := range f.procs {
		if !pr.ready || pr.stopping || pr.dead || pr.ctl == nil || pr.ctlBroken || pr.conns >= f.spec.Target {
			continue
		}
		if best == nil || pr.conns < best.conns || (pr.conns == best.conns && pr.load() < best.load()) {
			best = pr
		}
	}
	return best
}

// handoffMessage is the line sent with each descriptor, in the shape Node's IPC channel
// expects for a handle; the Go and Python wrappers read the same line.
type handoffMessage struct {
	Cmd  string `json:"cmd"`
	Type string `json:"type"`
	Msg  struct {
		Sless  string `json:"sless"`
		Prefix string `json:"prefix"`
	} `json:"msg"`
}

// sendConn writes one handoff line carrying conn's descriptor (SCM_RIGHTS) to the process.
func (pr *process) sendConn(conn syscall.Conn, buffered []byte) error {
	m := handoffMessage{Cmd: "NODE_HANDLE", Type: "net.Socket"}
	m.Msg.Sless, m.Msg.Prefix = "conn", base64.StdEncoding.EncodeToString(buffered)
	line, err := json.Marshal(m)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	pr.ctlMu.Lock()
	defer pr.ctlMu.Unlock()
	// A wrapper that stopped reading must not hang the gateway's request goroutine.
	if err := pr.ctl.SetWriteDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	var n int
	var werr error
	if err := raw.Control(func(fd uintptr) {
		n, _, werr = pr.ctl.WriteMsgUnix(line, syscall.UnixRights(int(fd)), nil)
	}); err != nil {
		return err
	}
	if werr == nil && n < len(line) {
		werr = io.ErrShortWrite
	}
	return werr
}

// openControl makes the socket pair of a process that may take connections: the parent's
// end is kept, the child's is returned for cmd.ExtraFiles (fd 3) and closed after the start.
func (pr *process) openControl() (*os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	parent := os.NewFile(uintptr(fds[0]), "sless-control")
	c, err := net.FileConn(parent)
	parent.Close()
	if err != nil {
		syscall.Close(fds[1])
		return nil, fmt.Errorf("control socket: %w", err)
	}
	pr.ctl = c.(*net.UnixConn)
	// Node acknowledges every handle; nothing else is ever read.
	go func() { _, _ = io.Copy(io.Discard, pr.ctl) }()
	return os.NewFile(uintptr(fds[1]), "sless-control-child"), nil
}

// handoffEnv tells the wrapper where its handed-off connections come from and where
// requests for other paths go.
func handoffEnv(spec Spec, gatewayURL string) []string {
	env := []string{"SLESS_FN_PREFIX=" + spec.DirectPrefix, "SLESS_GATEWAY_URL=" + gatewayURL}
	if filepath.Base(spec.Artifact.Command[0]) == "node" {
		return append(env, "NODE_CHANNEL_FD=3", "NODE_CHANNEL_SERIALIZATION_MODE=json")
	}
	return append(env, "SLESS_HANDOFF_FD=3")
}

// directLine is a wrapper log line about handed-off connections.
type directLine struct {
	Msg         string `json:"msg"`
	Direct      bool   `json:"direct"`
	Active      int    `json:"active"`
	Method      string `json:"method"`
	Path        string `json:"path"`
	Status      int    `json:"status"`
	StartUS     int64  `json:"start_us"`
	DurationUS  int64  `json:"duration_us"`
	Traceparent string `json:"traceparent"`
}

// parseDirect recognises a direct line; other output is the function's own. It reads the
// flat objects the wrappers write (one per request, so encoding/json's reflection was a
// measurable share of a direct request's CPU) and hands anything else to encoding/json.
func parseDirect(line []byte) (directLine, bool) {
	if !bytes.Contains(line, []byte(`"direct"`)) {
		return directLine{}, false
	}
	d, ok := scanFlat(line)
	if !ok {
		d = directLine{}
		if json.Unmarshal(line, &d) != nil {
			return directLine{}, false
		}
	}
	return d, d.Direct
}

// scanFlat decodes a JSON object whose values are all strings without escapes, numbers or
// booleans; ok is false for any other shape.
func scanFlat(b []byte) (d directLine, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return d, false
	}
	for i = skipSpace(b, i+1); i < len(b) && b[i] != '}'; i = skipSpace(b, i) {
		key, next, ok := plainString(b, i)
		if !ok || !lowerName(key) {
			return d, false
		}
		if i = skipSpace(b, next); i >= len(b) || b[i] != ':' {
			return d, false
		}
		i = skipSpace(b, i+1)
		var str, raw []byte
		if i < len(b) && b[i] == '"' {
			if str, i, ok = plainString(b, i); !ok {
				return d, false
			}
		} else {
			start := i
			for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ' ' {
				i++
			}
			if raw = b[start:i]; len(raw) == 0 || raw[0] == '{' || raw[0] == '[' {
				return d, false
			}
		}
		if !d.set(string(key), str, raw) {
			return d, false
		}
		if i = skipSpace(b, i); i < len(b) && b[i] == ',' {
			i++
		}
	}
	return d, i == len(b)-1
}

// set stores one field; str holds a string value, raw any other. A value of another type
// than the field's is not ok (encoding/json decides those lines).
func (d *directLine) set(key string, str, raw []byte) bool {
	text := func(dst *string) bool {
		*dst = string(str)
		return str != nil
	}
	num := func(dst *int64) bool {
		n, err := strconv.ParseInt(string(raw), 10, 64)
		*dst = n
		return raw != nil && err == nil
	}
	var n int64
	switch key {
	case "msg":
		return text(&d.Msg)
	case "method":
		return text(&d.Method)
	case "path":
		return text(&d.Path)
	case "traceparent":
		return text(&d.Traceparent)
	case "direct":
		d.Direct = string(raw) == "true"
		return d.Direct || string(raw) == "false"
	case "active":
		ok := num(&n)
		d.Active = int(n)
		return ok
	case "status":
		ok := num(&n)
		d.Status = int(n)
		return ok
	case "start_us":
		return num(&d.StartUS)
	case "duration_us":
		return num(&d.DurationUS)
	}
	return true
}

// plainString returns the string starting at b[i] (a quote) and the index after it; ok is
// false for escapes, control characters and non-ASCII, which encoding/json decodes.
func plainString(b []byte, i int) (s []byte, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, i, false
	}
	end := bytes.IndexByte(b[i+1:], '"')
	if end < 0 {
		return nil, i, false
	}
	s = b[i+1 : i+1+end]
	for _, c := range s {
		if c == '\\' || c < 0x20 || c >= 0x80 {
			return nil, i, false
		}
	}
	return s, i + end + 2, true
}

// lowerName reports whether key is one encoding/json would match only exactly.
func lowerName(key []byte) bool {
	for _, c := range key {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	return i
}

// noteDirect applies a direct line of pr: its level of unanswered direct requests, its last
// use, a closed connection, and the record of an answered invocation.
func (f *function) noteDirect(pr *process, d directLine) {
	f.mu.Lock()
	pr.direct, pr.lastUsed = max(d.Active, 0), time.Now()
	if d.Msg == "direct connection closed" && pr.conns > 0 {
		pr.conns--
	}
	if f.waiting > 0 {
		f.broadcast()
	}
	f.mu.Unlock()
	if on := f.pool.opts.OnDirect; on != nil && d.Msg == "invocation" {
		on(f.key, DirectInvocation{Method: d.Method, Path: d.Path, Status: d.Status,
			Start: time.UnixMicro(d.StartUS), Duration: time.Duration(d.DurationUS) * time.Microsecond, Traceparent: d.Traceparent})
	}
}

// validDirectPrefix refuses prefixes the wrappers could not match literally.
func validDirectPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if prefix[0] != '/' || bytes.ContainsAny([]byte(prefix), " ?#\r\n") || prefix[len(prefix)-1] == '/' {
		return fmt.Errorf("direct prefix %s: want an escaped path like /fn/<namespace>/<name>", strconv.Quote(prefix))
	}
	return nil
}
