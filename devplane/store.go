package devplane

import (
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
	"sync/atomic"
	"time"

	"sless.dev/sless/gateway/api"
)

// The dev plane's objects are kept one file each under <data-dir>/state, so a write costs
// what its object weighs, never what the whole state weighs (one tenant's large objects do
// not slow everyone's writes):
//
//	state/version                     "2"
//	state/namespaces/<ns>             (empty)
//	state/<kind>s/<ns>/<name>.json    a record
//
// Readers use an immutable snapshot without locks. A writer persists its change (temporary
// file, fsync, rename, directory fsync) without holding the store's lock, so writes of other
// objects go on meanwhile, and only then publishes it, so nothing unacknowledged is ever
// visible; writes that touch the same file wait for each other.

const storeVersion = "2"

// meta is what every object has: identity, creation time and a generation bumped on each
// spec change (observed by the status, as in Kubernetes).
type meta struct {
	Namespace  string    `json:"namespace"`
	Name       string    `json:"name"`
	CreatedAt  time.Time `json:"created_at"`
	Generation int64     `json:"generation"`
}

// record is one object: its spec, its status and the generation the status describes.
type record[S, T any] struct {
	meta
	Spec               S     `json:"spec"`
	Status             T     `json:"status"`
	ObservedGeneration int64 `json:"observed_generation"`
}

type (
	functionRecord = record[api.FunctionSpec, functionStatus]
	triggerRecord  = record[api.TriggerSpec, api.TriggerStatus]
	jobRecord      = record[api.JobSpec, api.JobStatus]
)

// snapshot is the state at one commit. Its maps and records are never changed once it is
// published; a write copies what it changes.
type snapshot struct {
	namespaces map[string]bool
	functions  map[string]*functionRecord
	triggers   map[string]*triggerRecord
	jobs       map[string]*jobRecord
}

func objectKey(ns, name string) string { return ns + "/" + name }

// table is one kind of object in the store: where its records live and how its spec is
// copied. Everything generic over kinds (CRUD, status writes, loading) goes through it.
type table[S, T any] struct {
	kind  string // "function", "trigger", "job": the API's word and the directory's
	of    func(*snapshot) *map[string]*record[S, T]
	clone func(S) S
	// defaults, when set, fills a spec's defaults, so a spec stored before a field existed
	// takes the field's default: every spec loaded or written goes through it (withDefaults).
	defaults func(*S)
}

// withDefaults is spec with its kind's defaults.
func (t table[S, T]) withDefaults(spec S) S {
	if t.defaults != nil {
		t.defaults(&spec)
	}
	return spec
}

func (t table[S, T]) dir(root string) string { return filepath.Join(root, t.kind+"s") }

func (t table[S, T]) path(root, key string) string {
	ns, name, _ := strings.Cut(key, "/")
	return filepath.Join(t.dir(root), ns, name+".json")
}

// copyRecord copies r deeply enough that changing the copy's spec or status leaves r alone.
func (t table[S, T]) copyRecord(r *record[S, T]) *record[S, T] {
	c := *r
	c.Spec = t.clone(r.Spec)
	return &c
}

var (
	functions = table[api.FunctionSpec, functionStatus]{kind: "function",
		of: func(s *snapshot) *map[string]*functionRecord { return &s.functions }, clone: cloneFunctionSpec, defaults: (*api.FunctionSpec).Default}
	triggers = table[api.TriggerSpec, api.TriggerStatus]{kind: "trigger",
		of: func(s *snapshot) *map[string]*triggerRecord { return &s.triggers }, clone: func(s api.TriggerSpec) api.TriggerSpec { return s }}
	jobs = table[api.JobSpec, api.JobStatus]{kind: "job",
		of: func(s *snapshot) *map[string]*jobRecord { return &s.jobs }, clone: cloneJobSpec}
)

func cloneFunctionSpec(s api.FunctionSpec) api.FunctionSpec {
	s.EnvVars = maps.Clone(s.EnvVars)
	s.Traffic = slices.Clone(s.Traffic)
	if s.Rollout != nil {
		r := *s.Rollout
		r.Steps = slices.Clone(r.Steps)
		s.Rollout = &r
	}
	if s.Source != nil {
		src := *s.Source
		s.Source = &src
	}
	return s
}

func cloneJobSpec(s api.JobSpec) api.JobSpec {
	s.EnvVars = maps.Clone(s.EnvVars)
	if s.Source != nil {
		src := *s.Source
		s.Source = &src
	}
	s.Event = slices.Clone(s.Event)
	return s
}

// store holds the published snapshot and orders writers.
type store struct {
	root string
	mu   sync.Mutex // guards inFlight and publishing; never held across a file write
	// inFlight holds the claims (files, and create quotas) of writes being persisted;
	// settled is signalled each time one is released.
	inFlight map[string]bool
	settled  *sync.Cond
	cur      atomic.Pointer[snapshot]
	// published is called (with mu held) after each new snapshot is published.
	published func(*snapshot)
	// persist makes a write's files durable (a seam for tests that hold a write mid-way).
	persist func([]fileWrite) error
}

func (s *store) snapshot() *snapshot { return s.cur.Load() }

// txn is one write: the records it puts or removes, applied to a copy of the snapshot.
type txn struct {
	next    *snapshot
	copied  map[string]bool // maps of next already copied from the base
	writes  []fileWrite
	ops     []func(*txn) // the changes, replayed on a newer snapshot when one was published meanwhile
	claims  []string     // held while the write is persisted: its files and claim()s
	changed bool
}

// change applies op to the write and records it with the file it persists.
func (tx *txn) change(path string, data []byte, op func(*txn)) {
	op(tx)
	tx.ops = append(tx.ops, op)
	tx.writes = append(tx.writes, fileWrite{path: path, data: data})
	tx.claims = append(tx.claims, path)
	tx.changed = true
}

// claim makes writes with the same claim wait for each other though they write different
// files (creates counted against one quota).
func (tx *txn) claim(name string) { tx.claims = append(tx.claims, name) }

type fileWrite struct {
	path string
	data []byte // nil: remove the file
}

// put stores r, with its spec's defaults, under key in the write.
func put[S, T any](tx *txn, root string, t table[S, T], key string, r *record[S, T]) error {
	r.Spec = t.withDefaults(r.Spec)
	data, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return fmt.Errorf("encoding %s %s: %w", t.kind, key, err)
	}
	tx.change(t.path(root, key), data, func(tx *txn) {
		m := cow(tx, t.kind, t.of(tx.next))
		(*m)[key] = r
	})
	return nil
}

// remove deletes key in the write.
func remove[S, T any](tx *txn, root string, t table[S, T], key string) {
	tx.change(t.path(root, key), nil, func(tx *txn) {
		m := cow(tx, t.kind, t.of(tx.next))
		delete(*m, key)
	})
}

// cow copies the map m of the write's snapshot on its first change (copy on write).
func cow[V any](tx *txn, kind string, m *map[string]V) *map[string]V {
	if !tx.copied[kind] {
		*m = maps.Clone(*m)
		tx.copied[kind] = true
	}
	return m
}

// putNamespace records ns in the write (a no-op when it is known).
func (tx *txn) putNamespace(root, ns string) {
	if tx.next.namespaces[ns] {
		return
	}
	tx.change(filepath.Join(root, "namespaces", ns), []byte{}, func(tx *txn) {
		m := cow(tx, "namespace", &tx.next.namespaces)
		(*m)[ns] = true
	})
}

// errVolatile marks a write that was published although persisting it failed: allowed for
// statuses, which describe what runs now and are written again by the next reconcile.
type errVolatile struct{ err error }

func (e errVolatile) Error() string { return e.err.Error() }
func (e errVolatile) Unwrap() error { return e.err }

// write applies change to a copy of the snapshot, persists what it changed and publishes
// it. A spec write that cannot be persisted changes nothing; a status write (volatile) is
// published anyway and its error returned, so the caller retries. change may run more than
// once (again after a write it collides with is published), so it only reads and records.
func (s *store) write(volatile bool, change func(tx *txn) error) error {
	s.mu.Lock()
	var tx *txn
	for {
		base := s.cur.Load()
		next := *base
		tx = &txn{next: &next, copied: map[string]bool{}}
		if err := change(tx); err != nil {
			s.mu.Unlock()
			return err
		}
		if !tx.changed {
			s.mu.Unlock()
			return nil
		}
		if !slices.ContainsFunc(tx.claims, func(c string) bool { return s.inFlight[c] }) {
			break
		}
		s.settled.Wait()
	}
	base := s.cur.Load()
	for _, c := range tx.claims {
		s.inFlight[c] = true
	}
	s.mu.Unlock()

	err := s.persist(tx.writes)

	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range tx.claims {
		delete(s.inFlight, c)
	}
	s.settled.Broadcast()
	if err != nil && !volatile {
		return err
	}
	if cur := s.cur.Load(); cur != base {
		// Writes of other objects were published meanwhile: replay this one on top.
		next := *cur
		tx2 := &txn{next: &next, copied: map[string]bool{}}
		for _, op := range tx.ops {
			op(tx2)
		}
		tx = tx2
	}
	s.cur.Store(tx.next)
	if s.published != nil {
		s.published(tx.next)
	}
	if err != nil {
		return errVolatile{err}
	}
	return nil
}

// persist makes the writes durable in order.
func persistFiles(writes []fileWrite) error {
	for _, w := range writes {
		var err error
		if w.data == nil {
			err = removeDurably(w.path)
		} else {
			err = writeAtomic(w.path, w.data)
		}
		if err != nil {
			return fmt.Errorf("saving the dev state: %w", err)
		}
	}
	return nil
}

// openStore loads the state under root, migrating the single-file state of older versions
// (legacy, e.g. <data-dir>/state.json) once.
func openStore(root, legacy string) (*store, error) {
	s := &store{root: root, inFlight: map[string]bool{}, persist: persistFiles}
	s.settled = sync.NewCond(&s.mu)
	if _, err := os.Stat(filepath.Join(root, "version")); errors.Is(err, fs.ErrNotExist) {
		if err := s.create(legacy); err != nil {
			return nil, err
		}
	}
	version, err := os.ReadFile(filepath.Join(root, "version"))
	if err != nil {
		return nil, fmt.Errorf("reading the dev state: %w", err)
	}
	if v := strings.TrimSpace(string(version)); v != storeVersion {
		return nil, fmt.Errorf("dev state %s has version %s, this sless reads %s; move it away to start empty", root, v, storeVersion)
	}
	snap := &snapshot{namespaces: map[string]bool{}}
	nsDirs, err := os.ReadDir(filepath.Join(root, "namespaces"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading the dev state: %w", err)
	}
	for _, e := range nsDirs {
		if !strings.Contains(e.Name(), ".tmp-") {
			snap.namespaces[e.Name()] = true
		}
	}
	if err := load(root, functions, snap); err != nil {
		return nil, err
	}
	if err := load(root, triggers, snap); err != nil {
		return nil, err
	}
	if err := load(root, jobs, snap); err != nil {
		return nil, err
	}
	s.cur.Store(snap)
	return s, nil
}

// load reads every record of t into snap; a file that does not hold the object its path
// names is an error that says how to recover.
func load[S, T any](root string, t table[S, T], snap *snapshot) error {
	m := map[string]*record[S, T]{}
	*t.of(snap) = m
	files, err := filepath.Glob(filepath.Join(t.dir(root), "*", "*.json"))
	if err != nil {
		return err
	}
	for _, f := range files {
		r, err := decodeRecord[S, T](f)
		if err != nil {
			return fmt.Errorf("dev state file %s is corrupt (%v); move it away to drop that %s", f, err, t.kind)
		}
		ns, name := filepath.Base(filepath.Dir(f)), strings.TrimSuffix(filepath.Base(f), ".json")
		if r.Namespace != ns || r.Name != name {
			return fmt.Errorf("dev state file %s holds %s %s/%s; move it away to drop it", f, t.kind, r.Namespace, r.Name)
		}
		r.Spec = t.withDefaults(r.Spec)
		m[objectKey(ns, name)] = r
	}
	return nil
}

func decodeRecord[S, T any](path string) (*record[S, T], error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r record[S, T]
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// create makes an empty store under root, filled from the legacy single file when there is
// one; the legacy file is renamed, not deleted.
func (s *store) create(legacy string) error {
	snap := &snapshot{namespaces: map[string]bool{}, functions: map[string]*functionRecord{},
		triggers: map[string]*triggerRecord{}, jobs: map[string]*jobRecord{}}
	data, err := os.ReadFile(legacy)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("reading the dev state %s: %w", legacy, err)
	default:
		var old struct {
			Namespaces map[string]bool            `json:"namespaces"`
			Functions  map[string]*functionRecord `json:"functions"`
			Triggers   map[string]*triggerRecord  `json:"triggers"`
			Jobs       map[string]*jobRecord      `json:"jobs"`
		}
		if err := json.Unmarshal(data, &old); err != nil {
			return fmt.Errorf("dev state %s is corrupt (%v); move it away to start empty", legacy, err)
		}
		snap.namespaces = nonNil(old.Namespaces)
		snap.functions, snap.triggers, snap.jobs = nonNil(old.Functions), nonNil(old.Triggers), nonNil(old.Jobs)
	}
	if err := os.MkdirAll(s.root, 0o700); err != nil {
		return fmt.Errorf("creating the dev state %s: %w", s.root, err)
	}
	s.cur.Store(snap)
	err = s.write(false, func(tx *txn) error {
		for ns := range snap.namespaces {
			tx.writes = append(tx.writes, fileWrite{path: filepath.Join(s.root, "namespaces", ns), data: []byte{}})
		}
		for key, r := range snap.functions {
			if err := put(tx, s.root, functions, key, r); err != nil {
				return err
			}
		}
		for key, r := range snap.triggers {
			if err := put(tx, s.root, triggers, key, r); err != nil {
				return err
			}
		}
		for key, r := range snap.jobs {
			if err := put(tx, s.root, jobs, key, r); err != nil {
				return err
			}
		}
		tx.writes = append(tx.writes, fileWrite{path: filepath.Join(s.root, "version"), data: []byte(storeVersion + "\n")})
		tx.changed = true
		return nil
	})
	if err != nil {
		return err
	}
	if data != nil {
		if err := os.Rename(legacy, legacy+".migrated"); err != nil {
			return fmt.Errorf("the dev state was copied to %s but %s could not be renamed: %w", s.root, legacy, err)
		}
	}
	return nil
}

func nonNil[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return m
}

// writeAtomic replaces path with data durably: a temporary file beside it, fsync, rename,
// fsync of the directory. A crash leaves the old or the new content, never a torn file.
func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("syncing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replacing %s: %w", path, err)
	}
	return syncDir(dir)
}

// removeDurably deletes path (gone already is fine) and syncs its directory.
func removeDurably(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}
