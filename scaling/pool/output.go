package pool

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/time/rate"
)

// Line is one line a function's process printed.
type Line struct {
	Time time.Time
	// Function is the pool key, Instance the process's address (see Stats.Addrs).
	Function, Instance string
	// Stream is "stdout" or "stderr".
	Stream string
	Text   string
}

// maxLine is the longest line kept whole; a longer one is cut into pieces of this size.
const maxLine = 64 << 10

// outputLimit caps the lines of one function and counts what it dropped.
type outputLimit struct {
	limit   *rate.Limiter
	per     float64
	dropped atomic.Int64
	// noticed is when the last "dropped" line went out (Unix ns): at most one a second.
	noticed atomic.Int64
}

func newOutputLimit(perSecond float64, burst int) *outputLimit {
	return &outputLimit{limit: rate.NewLimiter(rate.Limit(perSecond), burst), per: perSecond}
}

// logPipe carries one output stream of a process through a pipe of 1 MiB instead of the
// default 64 KiB: Node writes to a pipe synchronously, and a full pipe stalls its event loop
// until the lines are read.
type logPipe struct {
	w    *os.File
	done chan struct{} // closed when every writer has gone and the lines are processed
}

func newLogPipe(out io.Writer) (*logPipe, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("output pipe: %w", err)
	}
	_, _ = unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, 1<<20) // best effort: the limit is a sysctl
	lp := &logPipe{w: w, done: make(chan struct{})}
	go func() {
		defer close(lp.done)
		_, _ = io.Copy(out, r)
		r.Close()
	}()
	return lp, nil
}

// started closes this side's copy of the write end once the process has its own (or will
// never run): the pipe ends when the process and whatever it forked have exited.
func (lp *logPipe) started() { lp.w.Close() }

// lineWriter splits one output stream into lines: the tail keeps the last bytes for error
// messages; each line goes to send within the output limit, and a line saying how many were
// dropped (at most one a second) takes the place of the rest.
type lineWriter struct {
	stream string
	tail   *tailBuffer
	limit  *outputLimit
	send   func(stream, text string)
	mu     sync.Mutex
	buf    []byte
}

// lineWriter is pr's writer for stream: lines go to the log and OnOutput as the
// function's, tagged with the process.
func (pr *process) lineWriter(stream string) *lineWriter {
	return &lineWriter{stream: stream, tail: pr.tail, limit: pr.fn.output, send: func(stream, text string) {
		pr.log.Info("function output", "stream", stream, "line", text)
		if on := pr.pool.opts.OnOutput; on != nil {
			on(Line{Time: time.Now(), Function: pr.fn.key, Instance: pr.addr, Stream: stream, Text: text})
		}
	}}
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.tail.Write(p)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.emit(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	for len(w.buf) >= maxLine { // a line without end: pass what we have
		w.emit(w.buf[:maxLine])
		w.buf = w.buf[maxLine:]
	}
	return len(p), nil
}

func (w *lineWriter) emit(text []byte) {
	text = bytes.TrimRight(text, "\r")
	if len(bytes.TrimSpace(text)) == 0 {
		return
	}
	out := w.limit
	if !out.limit.Allow() {
		out.dropped.Add(1)
		return
	}
	if now := time.Now().UnixNano(); out.dropped.Load() > 0 && now-out.noticed.Load() >= int64(time.Second) {
		out.noticed.Store(now)
		n := out.dropped.Swap(0)
		w.send("stderr", fmt.Sprintf("[sless] %d lines of output dropped: this function printed more than %.0f lines a second", n, out.per))
	}
	w.send(w.stream, string(text))
}
