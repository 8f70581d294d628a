package devplane_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/test/testkit"
)

// talker prints on both streams and answers with what it was asked to say.
const talker = `import sys
def handle(event):
    print("out:" + event.get("say", ""), flush=True)
    print("err:" + event.get("say", ""), file=sys.stderr, flush=True)
    return "said"
`

// logs GETs path (under the tenant's namespace) and decodes the NDJSON lines.
func (d *dev) logs(path, token string) (int, []api.LogLine) {
	d.t.Helper()
	req, _ := http.NewRequest("GET", d.endpoint+"/v1/namespaces/"+d.ns+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	var lines []api.LogLine
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var l api.LogLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			if resp.StatusCode == http.StatusOK {
				d.t.Fatalf("%s: line %q: %v", path, sc.Text(), err)
			}
			continue
		}
		lines = append(lines, l)
	}
	return resp.StatusCode, lines
}

func withText(lines []api.LogLine, text string) []api.LogLine {
	var out []api.LogLine
	for _, l := range lines {
		if strings.Contains(l.Line, text) {
			out = append(out, l)
		}
	}
	return out
}

// TestLogs: a function's output by stream and instance, with ?tail and ?since; followed
// live while it is invoked; the build's own output; a job run's; and only for the tenant.
func TestLogs(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{})
	d.deploy("talker", "python3.11", map[string]string{"handler.py": talker}, api.FunctionFields{})
	for _, say := range []string{"one", "two"} {
		if code, _ := d.invoke("talker", `{"say":"`+say+`"}`); code != 200 {
			t.Fatalf("invoke: %d", code)
		}
	}
	var lines []api.LogLine
	// Both calls' own lines and the wrapper's access line after each: nothing more is
	// printed until the next call, so ?tail=1 below reads the same last line.
	testkit.WaitFor(t, "the lines of both calls", 5*time.Second, func() bool {
		_, lines = d.logs("/functions/talker/logs", d.token)
		return len(withText(lines, ":two")) == 2 && len(withText(lines, `"msg": "invocation"`)) == 2
	})
	out, errl := withText(lines, "out:one"), withText(lines, "err:one")
	if len(out) != 1 || out[0].Stream != "stdout" || len(errl) != 1 || errl[0].Stream != "stderr" || out[0].Instance == "" || out[0].Time.IsZero() {
		t.Fatalf("lines: %+v", lines)
	}
	if _, tail := d.logs("/functions/talker/logs?tail=1", d.token); len(tail) != 1 || tail[0].Line != lines[len(lines)-1].Line {
		t.Fatalf("?tail=1: %+v", tail)
	}
	if _, none := d.logs("/functions/talker/logs?since="+time.Now().Add(time.Hour).Format(time.RFC3339), d.token); len(none) != 0 {
		t.Fatalf("?since in the future: %+v", none)
	}

	// Follow: a line printed after the request started arrives on the open stream.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", d.endpoint+"/v1/namespaces/"+d.ns+"/functions/talker/logs?follow=true&tail=1", nil)
	req.Header.Set("Authorization", "Bearer "+d.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "application/x-ndjson" {
		t.Fatalf("follow: %d %s", resp.StatusCode, ct)
	}
	got := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			got <- sc.Text()
		}
	}()
	<-got // the tail line
	if code, _ := d.invoke("talker", `{"say":"live"}`); code != 200 {
		t.Fatal("invoke while following")
	}
	for deadline := time.After(10 * time.Second); ; {
		select {
		case line := <-got:
			if strings.Contains(line, "out:live") {
				goto followed
			}
		case <-deadline:
			t.Fatal("the followed stream did not bring the new line")
		}
	}
followed:

	// The build's own output.
	fn := d.deploy("bad", "go1.25", map[string]string{"handler.go": "package handler\n\nfunc Handle(event map[string]interface{}) interface{} { return undefinedThing }\n"}, api.FunctionFields{})
	if fn.Status.Phase != api.PhaseFailed {
		t.Fatalf("a build that cannot compile: %+v", fn.Status)
	}
	if _, build := d.logs("/functions/bad/builds/latest/logs", d.token); len(withText(build, "[sless] building go1.25")) != 1 || len(withText(build, "undefined: undefinedThing")) == 0 {
		t.Fatalf("build log: %+v", build)
	}

	// A job run's output.
	run, event := int64(1), json.RawMessage(`{"say":"job"}`)
	if _, err := d.client.CreateJob(context.Background(), d.ns, api.CreateJob{Name: "once", JobFields: api.JobFields{Function: ptr.To("talker"), Event: &event, RunID: &run}}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the job's lines", 30*time.Second, func() bool {
		_, job := d.logs("/jobs/once/logs", d.token)
		return len(withText(job, "out:job")) == 1 && len(withText(job, "[sless] run 1")) == 1
	})

	// Only the tenant's own; bad queries are 400s; unknown objects 404s.
	other := testkit.Token(t, hmacKey, "other-"+randomHex(t))
	for _, tc := range []struct {
		path, token string
		code        int
	}{
		{"/functions/talker/logs", other, http.StatusForbidden},
		{"/functions/nope/logs", d.token, http.StatusNotFound},
		{"/jobs/nope/logs", d.token, http.StatusNotFound},
		{"/functions/talker/logs?tail=0", d.token, http.StatusBadRequest},
		{"/functions/talker/logs?since=yesterday", d.token, http.StatusBadRequest},
		{"/functions/talker/logs?follow=maybe", d.token, http.StatusBadRequest},
	} {
		if code, _ := d.logs(tc.path, tc.token); code != tc.code {
			t.Errorf("GET %s: %d, want %d", tc.path, code, tc.code)
		}
	}
}

// TestOutputFloodIsBoundedInBytes is attack 6 of issue 24: a function printing long lines as
// fast as it can for a few seconds leaves at most the pool's byte limit (1 MiB plus 256 KiB
// a second) in its log files and in sless dev's own log, and is not held on its pipe;
// another tenant's function answers meanwhile and all its lines are in its log.
func TestOutputFloodIsBoundedInBytes(t *testing.T) {
	platform := &testkit.MatchCounter{Match: "function=flood."}
	d := startDev(t, devOptions{logOut: platform})
	start := time.Now() // no earlier than the flooding function's limits
	d.deploy("flood", "python3.11", map[string]string{"handler.py": testkit.FloodPython}, api.FunctionFields{})
	calm := d.as("calm")
	calm.deploy("talker", "python3.11", map[string]string{"handler.py": talker}, api.FunctionFields{})
	if code, _ := calm.invoke("talker", `{"say":"warm"}`); code != 200 {
		t.Fatalf("the calm function: %d", code)
	}
	done := make(chan string, 1)
	go func() { _, body := d.invoke("flood", `{"seconds":3}`); done <- body }()
	calls := 0
	for t0 := time.Now(); time.Since(t0) < 3*time.Second; calls++ {
		c0 := time.Now()
		if code, _ := calm.invoke("talker", fmt.Sprintf(`{"say":"c%d"}`, calls)); code != 200 {
			t.Fatalf("the calm function during the flood: %d", code)
		}
		if took := time.Since(c0); took > time.Second {
			t.Errorf("the calm function took %s during the flood", took)
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case body := <-done:
		if !strings.Contains(body, "flooded") {
			t.Fatalf("the flooding function answered %q", body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the flooding function was held on its output")
	}
	time.Sleep(300 * time.Millisecond) // the last lines filed
	// Each line adds its JSON fields on disk, each record its attributes in the platform log.
	bound := int64(1<<20) + int64(time.Since(start).Seconds()*(256<<10))
	var onDisk int64
	files, _ := filepath.Glob(filepath.Join(d.dataDir, "logs", "function", d.ns, "flood.log*"))
	for _, f := range files {
		if info, err := os.Stat(f); err == nil {
			onDisk += info.Size()
		}
	}
	t.Logf("the flood left %d bytes in its log files, %d in the platform log; bound %d", onDisk, platform.Bytes(), bound)
	if onDisk == 0 || onDisk > bound+bound/10 {
		t.Errorf("%d bytes in the flooding function's log files %v, want at most %d", onDisk, files, bound)
	}
	if got := platform.Bytes(); got > bound+bound/10 {
		t.Errorf("%d bytes of the flooding function in the platform log, want at most %d", got, bound)
	}
	var lines []api.LogLine
	testkit.WaitFor(t, "the calm function's lines", 5*time.Second, func() bool {
		_, lines = calm.logs("/functions/talker/logs", calm.token)
		return len(withText(lines, "out:c")) == calls
	})
}
