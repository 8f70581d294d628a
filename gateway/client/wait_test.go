package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
)

// TestWaitReady: WaitReady over what the API answers, read after read (the last answer
// repeats): Ready, a new failure and an older one, a build held for a slot (not counted
// against the timeout) and one that builds too long, a read refused, a read that hangs, and
// the caller giving up.
func TestWaitReady(t *testing.T) {
	const (
		interval = 10 * time.Millisecond
		// Long enough for a few reads on a loaded machine (80 ms ran out after two beside
		// the e2e suite); the held case repeats its status past it.
		timeout = time.Second
	)
	t1, t2 := time.Unix(1, 0), time.Unix(2, 0)
	var (
		building = api.FunctionStatus{Phase: api.PhaseBuilding, Message: "building"}
		held     = api.FunctionStatus{Phase: api.PhaseBuilding, Message: rules.BuildSlotWait + ": 2 of 2 builds running"}
		ready    = api.FunctionStatus{Phase: api.PhaseReady, Ready: true}
		failed   = api.FunctionStatus{Phase: api.PhaseFailed, Message: "build failed", LastBuildError: "main.go:3: undefined: x\n", LastBuildTime: &t1}
		again    = api.FunctionStatus{Phase: api.PhaseFailed, Message: "build failed", LastBuildError: "main.go:3: undefined: x\n", LastBuildTime: &t2}
		noLog    = api.FunctionStatus{Phase: api.PhaseFailed, Message: "image unresolvable"}
	)
	repeat := func(st api.FunctionStatus, n int) []api.FunctionStatus {
		out := make([]api.FunctionStatus, n)
		for i := range out {
			out[i] = st
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		prev    api.FunctionStatus
		answers []api.FunctionStatus // a zero status: the read is answered 404
		hang    bool                 // the reads never answer
		cancel  bool                 // the caller gives up after the first read
		wantErr func(error) bool
		output  string // a *BuildError's
		reads   int    // at least
		phase   string // of the function returned
	}{
		{name: "ready at once", answers: []api.FunctionStatus{ready}, wantErr: noError, reads: 1, phase: api.PhaseReady},
		{name: "built, then ready", answers: []api.FunctionStatus{building, building, ready}, wantErr: noError, reads: 3, phase: api.PhaseReady},
		{name: "a new failure", prev: building, answers: []api.FunctionStatus{building, failed}, wantErr: isBuildError, output: failed.LastBuildError, reads: 2, phase: api.PhaseFailed},
		{name: "a failure without a build log", answers: []api.FunctionStatus{noLog}, wantErr: isBuildError, output: noLog.Message, reads: 1, phase: api.PhaseFailed},
		{name: "the older build's failure is no outcome", prev: failed, answers: []api.FunctionStatus{failed, building, ready}, wantErr: noError, reads: 3, phase: api.PhaseReady},
		{name: "the same failure after a build is a new one", prev: failed, answers: []api.FunctionStatus{failed, building, failed}, wantErr: isBuildError, output: failed.LastBuildError, reads: 3, phase: api.PhaseFailed},
		{name: "a failure of a later build", prev: failed, answers: []api.FunctionStatus{failed, again}, wantErr: isBuildError, output: again.LastBuildError, reads: 2, phase: api.PhaseFailed},
		{name: "held for a slot longer than the timeout, then built", answers: append(repeat(held, 3*int(timeout/interval)), building, ready), wantErr: noError, reads: 3*int(timeout/interval) + 2, phase: api.PhaseReady},
		{name: "a build longer than the timeout", answers: repeat(building, 10*int(timeout/interval)), wantErr: isTimeout, reads: 2, phase: api.PhaseBuilding},
		{name: "a read refused", answers: []api.FunctionStatus{building, {}}, wantErr: IsNotFound, reads: 2, phase: api.PhaseBuilding},
		{name: "a read that hangs ends at the timeout", hang: true, wantErr: isTimeout, reads: 1},
		{name: "the caller gives up", answers: []api.FunctionStatus{building}, cancel: true, wantErr: isCanceled, reads: 1, phase: api.PhaseBuilding},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reads atomic.Int64
			c := serve(t, "", func(w http.ResponseWriter, r *http.Request) {
				i := int(reads.Add(1)) - 1
				if tc.hang {
					<-r.Context().Done()
					return
				}
				st := tc.answers[min(i, len(tc.answers)-1)]
				if st.Phase == "" {
					http.Error(w, `{"error":"function \"f\" not found"}`, http.StatusNotFound)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(api.Function{Name: "f", Namespace: "ns", Status: st})
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var progress []bool
			start := time.Now()
			fn, err := c.WaitReady(ctx, "ns", "f", tc.prev, WaitOptions{Timeout: timeout, Interval: interval, Progress: func(_ api.Function, done bool) {
				progress = append(progress, done)
				if tc.cancel {
					cancel()
				}
			}})
			if !tc.wantErr(err) {
				t.Fatalf("err %v (%T) after %s", err, err, time.Since(start))
			}
			var be *BuildError
			if errors.As(err, &be) && (be.Function != "f" || be.Output != tc.output) {
				t.Errorf("build error %+v, want output %q", be, tc.output)
			}
			if fn.Status.Phase != tc.phase {
				t.Errorf("returned phase %q, want %q", fn.Status.Phase, tc.phase)
			}
			if n := int(reads.Load()); n < tc.reads {
				t.Errorf("%d reads, want %d at least", n, tc.reads)
			}
			// Progress sees every read that answered, done only with the one that ends the wait.
			for i, done := range progress {
				if want := i == len(progress)-1 && (err == nil || be != nil); done != want {
					t.Errorf("progress %v: done must be the last call's, and only when Ready or failed", progress)
					break
				}
			}
		})
	}
}

func noError(err error) bool { return err == nil }

func isBuildError(err error) bool {
	var be *BuildError
	return errors.As(err, &be)
}

// isTimeout is WaitReady's own timeout: the deadline error itself, not a wrapped read error.
func isTimeout(err error) bool { return err == context.DeadlineExceeded }

func isCanceled(err error) bool { return err == context.Canceled }
