package devplane

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
)

func openTestStore(t *testing.T, dataDir string) *store {
	t.Helper()
	s, err := openStore(filepath.Join(dataDir, "state"), filepath.Join(dataDir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func fillStore(t *testing.T, s *store) {
	t.Helper()
	err := s.write(false, func(tx *txn) error {
		tx.putNamespace(s.root, "ns")
		fn := &functionRecord{meta: newMeta("ns", "a"), Spec: api.FunctionSpec{Runtime: "go1.25", EnvVars: map[string]string{"K": "V"}}}
		if err := put(tx, s.root, functions, "ns/a", fn); err != nil {
			return err
		}
		tr := &triggerRecord{meta: newMeta("ns", "t"), Spec: api.TriggerSpec{Type: api.TriggerCron, Function: "a", Schedule: "* * * * *", Enabled: true}}
		if err := put(tx, s.root, triggers, "ns/t", tr); err != nil {
			return err
		}
		j := &jobRecord{meta: newMeta("ns", "j"), Spec: api.JobSpec{Function: "a", RunID: 2}, Status: api.JobStatus{Phase: api.JobSucceeded, ObservedRunID: 2}}
		return put(tx, s.root, jobs, "ns/j", j)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func sameSnapshot(a, b *snapshot) bool {
	return equalJSON(a.namespaces, b.namespaces) && equalJSON(a.functions, b.functions) &&
		equalJSON(a.triggers, b.triggers) && equalJSON(a.jobs, b.jobs)
}

// TestStoreRoundTrip: what was written loads back; a write that changes nothing writes
// nothing; every object is a file of its own and no temporary file stays behind.
func TestStoreRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir)
	if n := len(s.snapshot().functions); n != 0 {
		t.Fatalf("a new store holds %d functions", n)
	}
	fillStore(t, s)
	before := s.snapshot()
	if err := s.write(false, func(*txn) error { return nil }); err != nil || s.snapshot() != before {
		t.Fatalf("an empty write published a new snapshot (%v)", err)
	}
	again := openTestStore(t, dir)
	if !sameSnapshot(s.snapshot(), again.snapshot()) {
		t.Fatalf("round trip changed the state:\n%+v\n%+v", s.snapshot(), again.snapshot())
	}
	for _, f := range []string{"functions/ns/a.json", "triggers/ns/t.json", "jobs/ns/j.json", "namespaces/ns", "version"} {
		if _, err := os.Stat(filepath.Join(dir, "state", f)); err != nil {
			t.Errorf("state/%s: %v", f, err)
		}
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, "state", "*", "*", "*.tmp-*"))
	if len(leftovers) > 0 {
		t.Fatalf("temporary files left behind: %v", leftovers)
	}
}

// TestStoreSnapshotsAreImmutable: a write publishes a new snapshot and leaves the one a
// reader holds untouched.
func TestStoreSnapshotsAreImmutable(t *testing.T) {
	s := openTestStore(t, t.TempDir())
	fillStore(t, s)
	held := s.snapshot()
	err := setStatusIn(s, functions, "ns/a", func(r *functionRecord) bool {
		r.Status.Phase = api.PhaseReady
		r.Spec.EnvVars["K"] = "changed"
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if held.functions["ns/a"].Status.Phase == api.PhaseReady || held.functions["ns/a"].Spec.EnvVars["K"] != "V" {
		t.Fatalf("the held snapshot changed: %+v", held.functions["ns/a"])
	}
	if s.snapshot().functions["ns/a"].Status.Phase != api.PhaseReady {
		t.Fatal("the write was not published")
	}
}

// setStatusIn is setStatus without a Backend.
func setStatusIn[S, T any](s *store, t table[S, T], key string, change func(*record[S, T]) bool) error {
	return s.write(true, func(tx *txn) error {
		r := t.copyRecord((*t.of(tx.next))[key])
		if !change(r) {
			return nil
		}
		return put(tx, s.root, t, key, r)
	})
}

// TestStoreFailedWrite: a spec write that cannot be persisted publishes nothing; a status
// write is shown but reported.
func TestStoreFailedWrite(t *testing.T) {
	s := openTestStore(t, t.TempDir())
	fillStore(t, s)
	before := s.snapshot()
	blocked := filepath.Join(s.root, "functions", "ns", "b.json")
	if err := os.MkdirAll(filepath.Join(blocked, "x"), 0o700); err != nil { // a directory where the file would go
		t.Fatal(err)
	}
	err := s.write(false, func(tx *txn) error {
		return put(tx, s.root, functions, "ns/b", &functionRecord{meta: newMeta("ns", "b")})
	})
	if err == nil || s.snapshot() != before {
		t.Fatalf("failed spec write: err %v, published %v", err, s.snapshot() != before)
	}
	err = s.write(true, func(tx *txn) error {
		return put(tx, s.root, functions, "ns/b", &functionRecord{meta: newMeta("ns", "b")})
	})
	var v errVolatile
	if !errors.As(err, &v) || s.snapshot().functions["ns/b"] == nil {
		t.Fatalf("failed status write: err %v, shown %v", err, s.snapshot().functions["ns/b"] != nil)
	}
}

// TestStoreMigratesTheSingleFile: the state.json of earlier versions is carried over once
// and kept beside as state.json.migrated.
func TestStoreMigratesTheSingleFile(t *testing.T) {
	dir := t.TempDir()
	legacy := `{"version":1,"namespaces":{"ns":true},` +
		`"functions":{"ns/a":{"namespace":"ns","name":"a","created_at":"2026-11-29T10:00:00Z","generation":3,"spec":{"runtime":"go1.25","timeout_sec":0,"min_replicas":0},"status":{"phase":"Ready"},"observed_generation":3}},` +
		`"triggers":{"ns/t":{"namespace":"ns","name":"t","generation":1,"spec":{"type":"http","function":"a","enabled":true},"status":{}}},` +
		`"jobs":{}}`
	if err := os.WriteFile(filepath.Join(dir, "state.json"), []byte(legacy), 0o600); err != nil {
		t.Fatal(err)
	}
	s := openTestStore(t, dir)
	snap := s.snapshot()
	if fn := snap.functions["ns/a"]; fn == nil || fn.Generation != 3 || fn.Spec.Runtime != "go1.25" || !snap.namespaces["ns"] || snap.triggers["ns/t"] == nil {
		t.Fatalf("migrated state: %+v", snap)
	}
	if _, err := os.Stat(filepath.Join(dir, "state.json.migrated")); err != nil {
		t.Fatal(err)
	}
	if again := openTestStore(t, dir); !sameSnapshot(snap, again.snapshot()) {
		t.Fatal("the migrated state does not load back")
	}
}

func TestStoreRejects(t *testing.T) {
	cases := map[string]struct {
		file, content, want string
	}{
		"torn record":     {"functions/ns/a.json", `{"namespace":"ns","na`, "corrupt"},
		"not JSON":        {"triggers/ns/t.json", "hello", "corrupt"},
		"wrong object":    {"jobs/ns/j.json", `{"namespace":"other","name":"j"}`, "holds job other/j"},
		"other version":   {"version", "99\n", "version 99"},
		"torn legacy":     {"../state.json", `{"version":1,"funct`, "corrupt"},
		"legacy not JSON": {"../state.json", `[]`, "corrupt"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if !strings.HasPrefix(tc.file, "../") {
				openTestStore(t, dir)
			}
			path := filepath.Join(dir, "state", tc.file)
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := openStore(filepath.Join(dir, "state"), filepath.Join(dir, "state.json"))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "move it away") {
				t.Fatalf("want an error saying %q and how to recover, got %v", tc.want, err)
			}
		})
	}
}

// FuzzStoreRecord: whatever a record file holds, opening the store returns the state or an
// error, never panics, and a loaded state writes and loads back unchanged.
func FuzzStoreRecord(f *testing.F) {
	f.Add([]byte(`{"namespace":"ns","name":"a","spec":{"runtime":"go1.25","timeout_sec":0,"min_replicas":0}}`))
	f.Add([]byte(`{"namespace":"ns","name":"a","spec":null,"status":{"phase":"Ready"},"generation":-1}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		openTestStore(t, dir)
		path := filepath.Join(dir, "state", "functions", "ns", "a.json")
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := openStore(filepath.Join(dir, "state"), filepath.Join(dir, "state.json"))
		if err != nil {
			return
		}
		r := s.snapshot().functions["ns/a"]
		if err := s.write(false, func(tx *txn) error { return put(tx, s.root, functions, "ns/a", r) }); err != nil {
			t.Fatal(err)
		}
		if again := openTestStore(t, dir); !sameSnapshot(s.snapshot(), again.snapshot()) {
			t.Fatal("a written state does not load back")
		}
	})
}

// TestStoreWritesDoNotWaitForOtherObjectsFsync: a write whose files are still being made
// durable holds no lock over other objects — a write of another object is persisted and
// published meanwhile — while a write of the same object waits for it and builds on it, and
// neither is visible before it is persisted.
func TestStoreWritesDoNotWaitForOtherObjectsFsync(t *testing.T) {
	s := openTestStore(t, t.TempDir())
	fillStore(t, s)
	slowPath := functions.path(s.root, "ns/a")
	entered, release := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	s.persist = func(ws []fileWrite) error {
		if ws[0].path == slowPath && held.CompareAndSwap(false, true) { // only the first write of ns/a
			close(entered)
			<-release
		}
		return persistFiles(ws)
	}
	bump := func(key, env string) func(*txn) error {
		return func(tx *txn) error {
			r := &functionRecord{meta: newMeta("ns", strings.TrimPrefix(key, "ns/"))}
			if old, ok := tx.next.functions[key]; ok {
				r = functions.copyRecord(old)
				r.Generation++
			}
			r.Spec.EnvVars = map[string]string{"K": env}
			return put(tx, s.root, functions, key, r)
		}
	}
	slow := make(chan error, 1)
	go func() { slow <- s.write(false, bump("ns/a", "slow")) }()
	<-entered
	other := make(chan error, 1)
	go func() { other <- s.write(false, bump("ns/b", "other")) }()
	select {
	case err := <-other:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("a write of another object waited for the held fsync")
	}
	if got := s.snapshot().functions["ns/b"]; got == nil || got.Spec.EnvVars["K"] != "other" {
		t.Fatalf("a write of another object waited for the held fsync: %+v", got)
	}
	if got := s.snapshot().functions["ns/a"]; got.Generation != 1 {
		t.Fatalf("a write not yet persisted is visible: generation %d", got.Generation)
	}
	same := make(chan error, 1)
	go func() { same <- s.write(false, bump("ns/a", "after")) }()
	select {
	case err := <-same:
		t.Fatalf("a write of the same object did not wait for the one being persisted (%v)", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	if err := <-same; err != nil {
		t.Fatal(err)
	}
	a, b := s.snapshot().functions["ns/a"], s.snapshot().functions["ns/b"]
	if a.Generation != 3 || a.Spec.EnvVars["K"] != "after" || b == nil {
		t.Fatalf("after both writes: ns/a generation %d env %v, ns/b %v; want 3, after, kept", a.Generation, a.Spec.EnvVars, b)
	}
	if again := openTestStore(t, filepath.Dir(s.root)); !sameSnapshot(s.snapshot(), again.snapshot()) {
		t.Fatal("the published state is not what was persisted")
	}
}

// TestLogStoreIsBounded: an object's log rotates at logFileBytes and keeps one older file,
// so what a flood leaves on disk is bounded; reads see the newest lines, in order.
func TestLogStoreIsBounded(t *testing.T) {
	s := &logStore{dir: t.TempDir(), m: map[string]*objectLog{}}
	line := strings.Repeat("x", 1000)
	const n = 20000 // ≈ 20 MB written
	for i := range n {
		s.append("function/ns/f", api.LogLine{Time: time.Unix(int64(i), 0), Line: line})
	}
	var total int64
	files, _ := filepath.Glob(filepath.Join(s.dir, "function", "ns", "*"))
	for _, f := range files {
		info, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		total += info.Size()
	}
	if len(files) != 2 || total > 2*logFileBytes+2000 {
		t.Fatalf("%d files, %d bytes on disk after %d MB of lines", len(files), total, n*1000>>20)
	}
	lines, _, _, err := s.read("function/ns/f", backend.LogQuery{Tail: 3})
	if err != nil || len(lines) != 3 || lines[2].Time.Unix() != n-1 || lines[0].Time.Unix() != n-3 {
		t.Fatalf("the newest 3 lines: %+v %v", lines, err)
	}
}

// TestRevisionEnvEncoding: a function's revisions keep their exact envs through the state
// file's encoding (each env as the changes from the one before) whatever changes — from and
// to none, set, changed, removed — and a status of the earlier form (every env in full)
// reads the same.
func TestRevisionEnvEncoding(t *testing.T) {
	envs := []map[string]string{nil, {"A": "1"}, {"A": "1", "B": "2"}, {"A": "3"}, {}, {"C": "4"}, nil}
	st := functionStatus{LastRevision: int64(len(envs))}
	for i, env := range envs {
		st.Revisions = append(st.Revisions, api.Revision{Name: fmt.Sprintf("f-%d", i+1), Number: int64(i + 1), Config: api.RevisionConfig{Runtime: "go1.25", EnvVars: env}})
	}
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	earlier, err := json.Marshal(struct {
		Revisions    []api.Revision `json:"revisions"`
		LastRevision int64          `json:"last_revision"`
	}{st.Revisions, st.LastRevision})
	if err != nil {
		t.Fatal(err)
	}
	for form, data := range map[string][]byte{"encoded": data, "earlier": earlier} {
		var got functionStatus
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatalf("%s: %v", form, err)
		}
		if len(got.Revisions) != len(envs) || got.LastRevision != st.LastRevision {
			t.Fatalf("%s: %d revisions, last %d", form, len(got.Revisions), got.LastRevision)
		}
		for i, r := range got.Revisions {
			if !maps.Equal(r.Config.EnvVars, envs[i]) || r.Name != st.Revisions[i].Name {
				t.Errorf("%s: revision %s env %v, want %v", form, r.Name, r.Config.EnvVars, envs[i])
			}
		}
	}
	if strings.Count(string(data), `"1"`) != 1 {
		t.Errorf("the unchanged value is written more than once: %s", data)
	}
}
