package pool

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/time/rate"

	"sless.dev/sless/rules"
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

// outputLimit caps the output of one function in lines and in bytes (a line of 64 KiB
// counts 64 KiB against the bytes), and counts what it dropped. The two limits are taken
// together: a line either passes both or is dropped without using up either.
type outputLimit struct {
	mu           sync.Mutex
	lines, bytes *rate.Limiter
	// dropped and droppedBytes count what was dropped since the last notice, noticed is when
	// it went out: at most one a second.
	dropped, droppedBytes int64
	noticed               time.Time
}

func newOutputLimit(o Options) *outputLimit {
	return &outputLimit{
		lines: rate.NewLimiter(rate.Limit(o.OutputRate), o.OutputBurst),
		bytes: rate.NewLimiter(rate.Limit(o.OutputBytesRate), o.OutputBytesBurst),
	}
}

// take reports whether a line of n bytes may pass and, when it may and output was dropped
// more than a second after the last notice, the notice to send before it.
func (o *outputLimit) take(n int) (notice string, ok bool) {
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lines.TokensAt(now) < 1 || o.bytes.TokensAt(now) < float64(n) {
		o.dropped++
		o.droppedBytes += int64(n)
		return "", false
	}
	o.lines.AllowN(now, 1)
	o.bytes.AllowN(now, n)
	if o.dropped > 0 && now.Sub(o.noticed) >= time.Second {
		notice = fmt.Sprintf("[sless] %d lines (%d bytes) of output dropped: this function printed more than %.0f lines or %d KiB a second",
			o.dropped, o.droppedBytes, float64(o.lines.Limit()), int(o.bytes.Limit())>>10)
		o.dropped, o.droppedBytes, o.noticed = 0, 0, now
	}
	return notice, true
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
// messages; each line goes to send within the output limit, and a line saying how much was
// dropped (at most one a second) takes the place of the rest. A dropped line costs only its
// scan, so the pipe drains at memory speed however much the function prints.
type lineWriter struct {
	stream string
	tail   *tailBuffer
	limit  *outputLimit
	// mask hides the function's secret values in each line before it is sent anywhere (a
	// line longer than maxLine is masked piece by piece).
	mask *rules.SecretMasker
	send func(stream, text string)
	mu   sync.Mutex
	buf  []byte
}

// lineWriter is pr's writer for stream: lines go to the log and OnOutput as the
// function's, tagged with the process.
func (pr *process) lineWriter(stream string) *lineWriter {
	return &lineWriter{stream: stream, tail: pr.tail, limit: pr.fn.output, mask: pr.spec.Mask, send: func(stream, text string) {
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
	notice, ok := w.limit.take(len(text))
	if notice != "" {
		w.send("stderr", notice)
	}
	if !ok {
		return
	}
	w.send(w.stream, w.mask.Mask(string(text)))
}
