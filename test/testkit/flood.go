package testkit

import (
	"strings"
	"sync/atomic"
)

// FloodPython is a Python handler printing lines of 60,000 bytes from four threads as fast
// as it can for the seconds its event asks ({"seconds": n}, 1 by default): the output flood
// the log bounds of the pool and of sless dev are tested against.
const FloodPython = `import sys, threading, time
LINE = "x" * 60000 + "\n"
def flood(until):
    while time.time() < until:
        sys.stdout.write(LINE)
def handle(event):
    until = time.time() + event.get("seconds", 1)
    threads = [threading.Thread(target=flood, args=(until,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sys.stdout.flush()
    return "flooded"
`

// MatchCounter is an io.Writer (for a slog handler) that counts the bytes of the records
// containing Match.
type MatchCounter struct {
	Match string
	n     atomic.Int64
}

func (w *MatchCounter) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.Match) {
		w.n.Add(int64(len(p)))
	}
	return len(p), nil
}

// Bytes is how many bytes matched so far.
func (w *MatchCounter) Bytes() int64 { return w.n.Load() }
