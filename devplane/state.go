package devplane

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"sless.dev/sless/gateway/api"
)

// stateVersion is bumped when the file layout changes incompatibly.
const stateVersion = 1

// state is everything `sless dev` must remember across restarts. Statuses are kept too, so a
// restart shows the last build error and last fire times; builds themselves are found again
// by content hash.
type state struct {
	Version    int                        `json:"version"`
	Namespaces map[string]bool            `json:"namespaces"`
	Functions  map[string]*functionRecord `json:"functions"`
	Triggers   map[string]*triggerRecord  `json:"triggers"`
	Jobs       map[string]*jobRecord      `json:"jobs"`
}

// meta is what every object has: identity, creation time and a generation bumped on each
// spec change (observed by the status, as in Kubernetes).
type meta struct {
	Namespace  string    `json:"namespace"`
	Name       string    `json:"name"`
	CreatedAt  time.Time `json:"created_at"`
	Generation int64     `json:"generation"`
}

type functionRecord struct {
	meta
	Spec               api.FunctionSpec   `json:"spec"`
	Status             api.FunctionStatus `json:"status"`
	ObservedGeneration int64              `json:"observed_generation"`
}

type triggerRecord struct {
	meta
	Spec   api.TriggerSpec   `json:"spec"`
	Status api.TriggerStatus `json:"status"`
}

type jobRecord struct {
	meta
	Spec   api.JobSpec   `json:"spec"`
	Status api.JobStatus `json:"status"`
}

func newState() *state {
	return &state{Version: stateVersion, Namespaces: map[string]bool{}, Functions: map[string]*functionRecord{},
		Triggers: map[string]*triggerRecord{}, Jobs: map[string]*jobRecord{}}
}

func objectKey(ns, name string) string { return ns + "/" + name }

// stateFile persists state with atomic replacement: write a temporary file, fsync it, rename
// it over the old one and fsync the directory. A crash at any point leaves either the old or
// the new state, never a torn file, and a write that returned is on disk.
type stateFile struct {
	path string
}

func (f stateFile) load() (*state, error) {
	data, err := os.ReadFile(f.path)
	if errors.Is(err, os.ErrNotExist) {
		return newState(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the dev state %s: %w", f.path, err)
	}
	st := newState()
	if err := json.Unmarshal(data, st); err != nil {
		return nil, fmt.Errorf("dev state %s is corrupt (%v); move it away to start empty", f.path, err)
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("dev state %s has version %d, this sless reads %d; move it away to start empty", f.path, st.Version, stateVersion)
	}
	if err := st.check(); err != nil {
		return nil, fmt.Errorf("dev state %s is corrupt (%v); move it away to start empty", f.path, err)
	}
	return st, nil
}

// check rejects entries a hand edit could leave behind: null objects and keys that do not
// match the object's namespace/name.
func (st *state) check() error {
	if st.Namespaces == nil {
		st.Namespaces = map[string]bool{}
	}
	for key, r := range st.Functions {
		if r == nil || key != objectKey(r.Namespace, r.Name) || r.Name == "" {
			return fmt.Errorf("function entry %q does not name itself", key)
		}
	}
	for key, r := range st.Triggers {
		if r == nil || key != objectKey(r.Namespace, r.Name) || r.Name == "" {
			return fmt.Errorf("trigger entry %q does not name itself", key)
		}
	}
	for key, r := range st.Jobs {
		if r == nil || key != objectKey(r.Namespace, r.Name) || r.Name == "" {
			return fmt.Errorf("job entry %q does not name itself", key)
		}
	}
	return nil
}
func (f stateFile) save(st *state) error {
	data, err := json.MarshalIndent(st, "", " ")
	if err != nil {
		return fmt.Errorf("encoding the dev state: %w", err)
	}
	return writeAtomic(f.path, data)
}

// writeAtomic replaces path with data durably.
func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
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
