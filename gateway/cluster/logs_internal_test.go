package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
)

func TestLogCursor(t *testing.T) {
	at := func(ms int) time.Time { return time.Date(2026, 12, 1, 10, 0, 0, ms*int(time.Millisecond), time.UTC) }
	for _, tc := range []struct {
		name string
		read []int // the lines read first (ms)
		// again are the lines the follow gets (from the cursor's second on), want those it emits.
		again, want []int
	}{
		{"nothing read: everything is new", nil, []int{0, 5, 5}, []int{0, 5, 5}},
		{"the read second again", []int{100, 200, 300}, []int{100, 200, 300, 400, 500}, []int{400, 500}},
		{"lines of the same time as the last read", []int{100, 300, 300}, []int{100, 300, 300, 300, 400}, []int{300, 400}},
		{"only new lines", []int{100}, []int{150, 150}, []int{150, 150}},
		{"nothing new", []int{100, 200}, []int{100, 200}, nil},
		{"after a fresh line, all are fresh", []int{100, 200}, []int{200, 250, 200}, []int{250, 200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &logCursor{}
			for _, ms := range tc.read {
				c.read(at(ms))
			}
			if got := c.since(); (got == nil) != (len(tc.read) == 0) || (got != nil && !got.Time.Equal(at(slices.Max(tc.read)))) {
				t.Errorf("since() = %v after reading %v", got, tc.read)
			}
			var got []int
			for _, ms := range tc.again {
				if c.fresh(at(ms)) {
					got = append(got, ms)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("emitted %v of %v, want %v", got, tc.again, tc.want)
			}
		})
	}
}

// fakePodLogs stands for the API server's pods list and pods/log (which needs a kubelet in a
// real cluster): sinceTime in whole seconds, as it goes over the wire; timestamps; follow.
type fakePodLogs struct {
	t       *testing.T
	mu      sync.Mutex
	pods    []string
	logs    map[string][]string // "<RFC 3339 time> <line>"; a pod without is gone (404)
	waiting map[string]bool     // its container has not started (400)
	onRead  func(pod string)    // called as a pod's log is read (not followed)
	since   []string            // the sinceTime values asked for
}

func (f *fakePodLogs) add(pod string, at time.Time, line string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logs[pod] = append(f.logs[pod], at.UTC().Format(time.RFC3339Nano)+" "+line)
}

func (f *fakePodLogs) lines(pod string, from int) ([]string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.logs[pod]
	return slices.Clone(l[min(from, len(l)):]), ok
}

func status(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg})
}

func (f *fakePodLogs) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	const prefix = "/api/v1/namespaces/ns/pods"
	rest, ok := strings.CutPrefix(r.URL.Path, prefix)
	switch {
	case !ok:
		http.NotFound(w, r)
	case rest == "":
		list := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}}
		for i, name := range f.pods {
			list.Items = append(list.Items, corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", CreationTimestamp: metav1.NewTime(time.Unix(int64(1000+i), 0))},
				Status:     corev1.PodStatus{Phase: corev1.PodRunning}})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(list)
	default:
		pod, ok := strings.CutSuffix(strings.TrimPrefix(rest, "/"), "/log")
		if !ok {
			http.NotFound(w, r)
			return
		}
		if r.URL.Query().Get("timestamps") != "true" {
			f.t.Errorf("pods/log of %s without timestamps=true: %s", pod, r.URL.RawQuery)
		}
		if f.waiting[pod] {
			status(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("container %q in pod %q is waiting to start: ContainerCreating", "function", pod))
			return
		}
		lines, exists := f.lines(pod, 0)
		if !exists {
			status(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("pods %q not found", pod))
			return
		}
		var since time.Time
		if s := r.URL.Query().Get("sinceTime"); s != "" {
			f.mu.Lock()
			f.since = append(f.since, s)
			f.mu.Unlock()
			var err error
			if since, err = time.Parse(time.RFC3339, s); err != nil {
				f.t.Errorf("sinceTime %q: %v", s, err)
			}
			since = since.Truncate(time.Second) // what the kubelet gets
		}
		follow := r.URL.Query().Get("follow") == "true"
		if !follow && f.onRead != nil {
			f.onRead(pod)
		}
		w.Header().Set("Content-Type", "text/plain")
		sent := 0
		write := func(lines []string) {
			for _, l := range lines {
				ts, _, _ := strings.Cut(l, " ")
				if t, _ := time.Parse(time.RFC3339Nano, ts); !t.Before(since) {
					fmt.Fprintln(w, l)
				}
			}
			sent += len(lines)
			w.(http.Flusher).Flush()
		}
		write(lines)
		for follow {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Millisecond):
				more, _ := f.lines(pod, sent)
				write(more)
			}
		}
	}
}

// startOfSecond waits for the next second to begin (and 20 ms more).
func startOfSecond() time.Time {
	now := time.Now()
	time.Sleep(now.Truncate(time.Second).Add(time.Second + 20*time.Millisecond).Sub(now))
	return time.Now()
}

// followLogs runs readLogs with q.Follow over f's pods and returns the lines it emits.
func followLogs(t *testing.T, f *fakePodLogs, q backend.LogQuery) (lines <-chan api.LogLine, stop func() error) {
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	b := &Backend{pods: kubernetes.NewForConfigOrDie(&rest.Config{Host: srv.URL}), log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan api.LogLine, 100)
	done := make(chan error, 1)
	go func() {
		done <- b.readLogs(ctx, q, "ns", labels.Everything(), "function", func(l api.LogLine) error {
			select {
			case out <- l:
			case <-ctx.Done():
			}
			return nil
		})
	}()
	stop = sync.OnceValue(func() error { cancel(); return <-done })
	t.Cleanup(func() { _ = stop() }) // before srv.Close, which waits for the followed streams
	return out, stop
}

// collect reads n lines, then makes sure no more come.
func collect(t *testing.T, lines <-chan api.LogLine, n int) []string {
	t.Helper()
	var got []string
	timeout := time.After(5 * time.Second)
	for len(got) < n {
		select {
		case l := <-lines:
			got = append(got, l.Instance+" "+l.Line)
		case <-timeout:
			t.Fatalf("got %q, want %d lines", got, n)
		}
	}
	select {
	case l := <-lines:
		t.Fatalf("got %q, then %s %s more", got, l.Instance, l.Line)
	case <-time.After(300 * time.Millisecond):
	}
	return got
}

func newFakePodLogs(t *testing.T, base time.Time) *fakePodLogs {
	f := &fakePodLogs{t: t, pods: []string{"p1", "p2", "gone", "starting"}, logs: map[string][]string{}, waiting: map[string]bool{"starting": true}}
	ms := func(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }
	f.add("p1", ms(1), "a")
	f.add("p1", ms(2), "b")
	f.add("p1", ms(2), "b at the same time")
	f.add("p1", ms(3), "c")
	f.add("p2", ms(4), "x")
	time.Sleep(time.Until(ms(10))) // lines printed from now on are newer
	return f
}

// TestFollowAfterTail: following goes on after each pod's last line read, so lines of the
// current second are not sent again, nor are lines --tail left out; a pod deleted since the
// list and one whose container has not started are skipped.
func TestFollowAfterTail(t *testing.T) {
	base := startOfSecond()
	f := newFakePodLogs(t, base)
	lines, stop := followLogs(t, f, backend.LogQuery{Source: backend.LogFunction, Tail: 2, Follow: true})
	if got := collect(t, lines, 2); !slices.Equal(got, []string{"p1 c", "p2 x"}) {
		t.Fatalf("the last 2 lines: %q", got)
	}
	f.add("p1", time.Now(), "d")
	f.add("p2", time.Now(), "y")
	got := collect(t, lines, 2)
	slices.Sort(got)
	if !slices.Equal(got, []string{"p1 d", "p2 y"}) {
		t.Fatalf("followed: %q, want only the new lines", got)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, s := range f.since {
		if ts, err := time.Parse(time.RFC3339, s); err != nil || ts.After(base) {
			t.Errorf("sinceTime %s: the follow must start at or before the last line read (%s)", s, base.Format(time.RFC3339Nano))
		}
	}
}

// TestFollowKeepsLinesPrintedWhileReading: a line a pod prints while the others are still
// being read (a slow first read) is followed, not lost.
func TestFollowKeepsLinesPrintedWhileReading(t *testing.T) {
	f := newFakePodLogs(t, startOfSecond())
	f.onRead = func(pod string) {
		if pod == "p2" {
			f.add("p1", time.Now(), "during the read of p2")
			startOfSecond() // the follow begins in a later second
		}
	}
	lines, stop := followLogs(t, f, backend.LogQuery{Source: backend.LogFunction, Follow: true})
	want := []string{"p1 a", "p1 b", "p1 b at the same time", "p1 c", "p2 x", "p1 during the read of p2"}
	if got := collect(t, lines, len(want)); !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestReadLogsSkipsGonePods: the read of a function's logs does not fail for a pod deleted
// since the list (scale-in) or not started yet; another error still fails it.
func TestReadLogsSkipsGonePods(t *testing.T) {
	f := newFakePodLogs(t, time.Now())
	srv := httptest.NewServer(f)
	defer srv.Close()
	b := &Backend{pods: kubernetes.NewForConfigOrDie(&rest.Config{Host: srv.URL}), log: slog.New(slog.DiscardHandler)}
	var got []string
	err := b.readLogs(context.Background(), backend.LogQuery{Source: backend.LogFunction}, "ns", labels.Everything(), "function", func(l api.LogLine) error {
		got = append(got, l.Instance+" "+l.Line)
		return nil
	})
	if want := []string{"p1 a", "p1 b", "p1 b at the same time", "p1 c", "p2 x"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("got %q, %v; want %q", got, err, want)
	}
	if podWithoutLog(fmt.Errorf("wrapped: %w", context.DeadlineExceeded)) {
		t.Error("a timeout counts as a pod without a log")
	}
}

// TestHasRun: a build's pod is Pending while its kaniko step (an init container) runs, and
// its log is read then; any other Pending pod's container has not run.
func TestHasRun(t *testing.T) {
	init := func(name string, st corev1.ContainerState) corev1.PodStatus {
		return corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{{Name: name, State: st}}}
	}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	for _, tc := range []struct {
		name      string
		status    corev1.PodStatus
		container string
		want      bool
	}{
		{"a running pod", corev1.PodStatus{Phase: corev1.PodRunning}, "function", true},
		{"a failed build", corev1.PodStatus{Phase: corev1.PodFailed}, "kaniko", true},
		{"a pending pod", corev1.PodStatus{Phase: corev1.PodPending}, "function", false},
		{"kaniko running in a pending pod", init("kaniko", running), "kaniko", true},
		{"kaniko done, push starting", init("kaniko", corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}), "kaniko", true},
		{"the fetch step running, kaniko waiting", init("fetch", running), "kaniko", false},
		{"kaniko waiting", init("kaniko", corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}), "kaniko", false},
	} {
		if got := hasRun(corev1.Pod{Status: tc.status}, tc.container); got != tc.want {
			t.Errorf("%s: hasRun = %v, want %v", tc.name, got, tc.want)
		}
	}
}
