package devplane

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sless.dev/sless/gateway/api"
)

func TestStateFileRoundTrip(t *testing.T) {
	f := stateFile{path: filepath.Join(t.TempDir(), "state.json")}
	st, err := f.load()
	if err != nil || len(st.Functions) != 0 {
		t.Fatalf("a missing file is an empty state: %+v %v", st, err)
	}
	st.Functions["ns/a"] = &functionRecord{meta: newMeta("ns", "a"), Spec: api.FunctionSpec{Runtime: "go1.25", EnvVars: map[string]string{"K": "V"}}}
	st.Triggers["ns/t"] = &triggerRecord{meta: newMeta("ns", "t"), Spec: api.TriggerSpec{Type: api.TriggerCron, Function: "a", Schedule: "* * * * *", Enabled: true}}
	st.Jobs["ns/j"] = &jobRecord{meta: newMeta("ns", "j"), Spec: api.JobSpec{Function: "a", RunID: 2}, Status: api.JobStatus{Phase: api.JobSucceeded, ObservedRunID: 2}}
	if err := f.save(st); err != nil {
		t.Fatal(err)
	}
	got, err := f.load()
	if err != nil {
		t.Fatal(err)
	}
	if !equalJSON(st, got) {
		t.Fatalf("round trip changed the state:\n%+v\n%+v", st, got)
	}
	entries, _ := os.ReadDir(filepath.Dir(f.path))
	if len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}
}

// TestStateFileCrashLeavesOldState simulates a crash between writing the temporary file and
// the rename: the acknowledged state is what loads.
func TestStateFileCrashLeavesOldState(t *testing.T) {
	dir := t.TempDir()
	f := stateFile{path: filepath.Join(dir, "state.json")}
	st := newState()
	st.Namespaces["acknowledged"] = true
	if err := f.save(st); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "state.json.tmp-123"), []byte(`{"version":1,"namespaces":{"torn`), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := f.load()
	if err != nil || !got.Namespaces["acknowledged"] {
		t.Fatalf("want the acknowledged state, got %+v %v", got, err)
	}
}

func TestStateFileRejects(t *testing.T) {
	cases := map[string]struct {
		content, want string
	}{
		"torn file":     {`{"version":1,"funct`, "corrupt"},
		"not JSON":      {"hello", "corrupt"},
		"other version": {`{"version":99}`, "version 99"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := stateFile{path: filepath.Join(t.TempDir(), "state.json")}
			if err := os.WriteFile(f.path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := f.load()
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "move it away") {
				t.Fatalf("want an error saying %q and how to recover, got %v", tc.want, err)
			}
		})
	}
}

// FuzzStateFile: whatever is in the state file, loading returns a state or an error, never
// panics, and a loaded state saves and loads back unchanged.
func FuzzStateFile(f *testing.F) {
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`{"version":1,"functions":{"ns/a":{"namespace":"ns","name":"a","spec":{"runtime":"go1.25","timeout_sec":0,"min_replicas":0}}}}`))
	f.Add([]byte(`{"version":1,"jobs":{"ns/j":null}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		sf := stateFile{path: filepath.Join(dir, "state.json")}
		if err := os.WriteFile(sf.path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		st, err := sf.load()
		if err != nil {
			return
		}
		if err := sf.save(st); err != nil {
			t.Fatal(err)
		}
		again, err := sf.load()
		if err != nil || !equalJSON(st, again) {
			t.Fatalf("saved state does not load back: %v", err)
		}
	})
}
