package devplane

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"sless.dev/sless/devplane/pool"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/rules"
)

// Logs of sless dev: what each function's processes, its latest build and each job's latest
// run printed, one JSON line each in a file per object under <data-dir>/logs. A file is
// rotated at logFileBytes and one older file kept, so a flood (already capped in lines and
// bytes per second by the pool) never fills the disk; followers get new lines from memory
// as they are written. A function's logs outlive its scale to zero and go with it when
// deleted.

// logFileBytes is the size at which an object's log file is rotated (two are kept).
const logFileBytes = 4 << 20

// followBuffer is how many lines a slow follower may fall behind before lines are skipped.
const followBuffer = 1024

type logStore struct {
	dir string
	mu  sync.Mutex
	m   map[string]*objectLog // by logKey
}

// objectLog is the log of one object: its open file and its followers.
type objectLog struct {
	mu   sync.Mutex
	path string
	file *os.File
	size int64
	subs map[chan api.LogLine]struct{}
}

func logKey(source backend.LogSource, ns, name string) string {
	return string(source) + "/" + ns + "/" + name
}

func (s *logStore) object(key string) *objectLog {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.m[key]
	if o == nil {
		o = &objectLog{path: filepath.Join(s.dir, key+".log"), subs: map[chan api.LogLine]struct{}{}}
		s.m[key] = o
	}
	return o
}

// append writes l to the object's log and hands it to its followers.
func (s *logStore) append(key string, l api.LogLine) {
	o := s.object(key)
	o.mu.Lock()
	defer o.mu.Unlock()
	_ = o.write(l) // best effort: a full disk must not stop the function
	for sub := range o.subs {
		select {
		case sub <- l:
		default: // a follower that stopped reading misses lines; the file still has them
		}
	}
}

func (o *objectLog) write(l api.LogLine) error {
	if o.file == nil {
		if err := os.MkdirAll(filepath.Dir(o.path), 0o700); err != nil {
			return err
		}
		f, err := os.OpenFile(o.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		info, err := f.Stat()
		if err != nil {
			f.Close()
			return err
		}
		o.file, o.size = f, info.Size()
	}
	data, err := json.Marshal(l)
	if err != nil {
		return err
	}
	n, err := o.file.Write(append(data, '\n'))
	o.size += int64(n)
	if err != nil {
		return err
	}
	if o.size >= logFileBytes {
		o.file.Close()
		o.file = nil
		return os.Rename(o.path, o.path+".1")
	}
	return nil
}

// reset starts the object's log anew (a new build).
func (s *logStore) reset(key string) {
	o := s.object(key)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closeFile()
	_ = os.Remove(o.path + ".1")
	_ = os.Remove(o.path)
}

// remove drops the object's log (the object is deleted); followers are let go.
func (s *logStore) remove(key string) {
	s.mu.Lock()
	o := s.m[key]
	delete(s.m, key)
	s.mu.Unlock()
	if o == nil {
		o = &objectLog{path: filepath.Join(s.dir, key+".log")}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closeFile()
	_ = os.Remove(o.path + ".1")
	_ = os.Remove(o.path)
	for sub := range o.subs {
		close(sub)
		delete(o.subs, sub)
	}
}

func (o *objectLog) closeFile() {
	if o.file != nil {
		o.file.Close()
		o.file = nil
	}
}

// read returns the lines q selects from the files, and, with q.Follow, a channel of the lines
// written after them (cancel ends it).
func (s *logStore) read(key string, q backend.LogQuery) (lines []api.LogLine, follow chan api.LogLine, cancel func(), err error) {
	o := s.object(key)
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, path := range []string{o.path + ".1", o.path} {
		if lines, err = readLogFile(path, q.Since, lines); err != nil {
			return nil, nil, nil, err
		}
	}
	if q.Tail > 0 && len(lines) > q.Tail {
		lines = lines[len(lines)-q.Tail:]
	}
	if !q.Follow {
		return lines, nil, func() {}, nil
	}
	sub := make(chan api.LogLine, followBuffer)
	o.subs[sub] = struct{}{}
	return lines, sub, func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		if _, ok := o.subs[sub]; ok {
			delete(o.subs, sub)
			close(sub)
		}
	}, nil
}

func readLogFile(path string, since time.Time, lines []api.LogLine) ([]api.LogLine, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return lines, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading log %s: %w", path, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var l api.LogLine
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Time.Before(since) {
			continue // a line torn by a crash, or too old
		}
		lines = append(lines, l)
	}
	return lines, nil
}

// Logs implements backend.Logs from the files of the data directory.
func (b *Backend) Logs(ctx context.Context, q backend.LogQuery, emit func(api.LogLine) error) error {
	snap := b.store.snapshot()
	key := objectKey(q.Namespace, q.Name)
	switch q.Source {
	case backend.LogJob:
		if _, ok := snap.jobs[key]; !ok {
			return notFound("job", q.Namespace, q.Name)
		}
	default:
		if _, ok := snap.functions[key]; !ok {
			return notFound("function", q.Namespace, q.Name)
		}
	}
	lines, follow, cancel, err := b.logs.read(logKey(q.Source, q.Namespace, q.Name), q)
	if err != nil {
		return err
	}
	defer cancel()
	for _, l := range lines {
		if err := emit(l); err != nil {
			return err
		}
	}
	if follow == nil {
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case l, ok := <-follow:
			if !ok {
				return nil // the object was deleted
			}
			if err := emit(l); err != nil {
				return err
			}
		}
	}
}

// onOutput files a line a function's process or a job run printed under its object (the
// pool masked it with the values the process runs with).
func (b *Backend) onOutput(l pool.Line) {
	var key, rev string
	if job, ok := strings.CutPrefix(l.Function, "job/"); ok {
		ns, name := splitKey(job)
		key = logKey(backend.LogJob, ns, name)
	} else if fn, r, ok := b.keyOfHost(l.Function); ok {
		ns, name := splitKey(fn)
		key, rev = logKey(backend.LogFunction, ns, name), r
	} else {
		return
	}
	b.logs.append(key, api.LogLine{Time: l.Time.UTC(), Instance: l.Instance, Revision: rev, Stream: l.Stream, Line: l.Text})
}

// maskOf is the masker of function fnKey's secret values (nil: none): those its revisions
// in the pool run with and those rotated away within maskRetired; for a function not in the
// pool yet, those of every secret its spec references now.
func (b *Backend) maskOf(fnKey string) *rules.SecretMasker {
	if d, ok := b.deployment(fnKey); ok {
		return d.mask
	}
	r, ok := b.store.snapshot().functions[fnKey]
	if !ok {
		return nil
	}
	var values [][]byte
	for _, name := range r.Spec.SecretNames() {
		if e, ok := b.secrets.get(objectKey(r.Namespace, name)); ok {
			values = slices.AppendSeq(values, maps.Values(e.data))
		}
	}
	return rules.NewSecretMasker(values)
}

// buildLog is the writer a build's own output goes to, line by line, into the function's
// (or self-contained job's) build log, masked with the function's values: a build sees
// none, but its source may hold one.
type buildLog struct {
	b    *Backend
	key  string
	mask *rules.SecretMasker
	buf  []byte
}

func (w *buildLog) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			break
		}
		if line := strings.TrimRight(string(w.buf[:i]), "\r"); line != "" {
			w.b.logs.append(w.key, api.LogLine{Time: time.Now().UTC(), Instance: "build", Line: w.mask.Mask(line)})
		}
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}
