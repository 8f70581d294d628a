package devplane_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

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
	testkit.WaitFor(t, "the lines of both calls", 5*time.Second, func() bool {
		_, lines = d.logs("/functions/talker/logs", d.token)
		return len(withText(lines, ":two")) == 2
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
	if _, err := d.client.CreateJob(context.Background(), d.ns, api.CreateJob{Name: "once", JobFields: api.JobFields{Function: ptr("talker"), Event: &event, RunID: &run}}); err != nil {
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
