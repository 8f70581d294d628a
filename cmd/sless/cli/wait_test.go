package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/client"
	"sless.dev/sless/rules"
)

// TestDeployWaitLeavesOutTheBuildSlot: `sless deploy`'s --wait-timeout counts the build, not
// the time the operator holds it back for a build slot (the cluster's queue), as the
// Terraform provider's build_timeout_sec; a build that itself outlasts the wait times out.
func TestDeployWaitLeavesOutTheBuildSlot(t *testing.T) {
	const timeout = 600 * time.Millisecond
	cases := []struct {
		name     string
		messages []string // the status message while building, one per 200 ms
		wantErr  string
	}{
		{"held for a slot longer than the wait, then built", []string{rules.BuildSlotWait + ": 2 of 2 builds running", rules.BuildSlotWait + ": 2 of 2 builds running",
			rules.BuildSlotWait + ": 2 of 2 builds running", rules.BuildSlotWait + ": 2 of 2 builds running", rules.BuildSlotWait + ": 2 of 2 builds running", "building"}, ""},
		{"a build longer than the wait", []string{"building", "building", "building", "building", "building", "building", "building", "building"}, "did not finish within 600ms"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			var reads atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.Contains(r.URL.Path, "/logs") {
					w.WriteHeader(http.StatusNotFound)
					return
				}
				reads.Add(1)
				st := api.FunctionStatus{Phase: api.PhaseReady, Ready: true}
				if i := int(time.Since(start) / (200 * time.Millisecond)); i < len(tc.messages) {
					st = api.FunctionStatus{Phase: api.PhaseBuilding, Message: tc.messages[i]}
				}
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(api.Function{Name: "f", Namespace: "ns", Status: st})
			}))
			defer srv.Close()
			c, err := client.New(srv.URL, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			s := &session{c: c, ns: "ns", endpoint: srv.URL}
			fn, err := waitDeployed(context.Background(), s, io.Discard, "f", api.FunctionStatus{}, start, timeout)
			switch {
			case tc.wantErr == "" && (err != nil || !fn.Status.Ready):
				t.Fatalf("wait: %v, %+v; want Ready", err, fn.Status)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("wait: %v; want %q", err, tc.wantErr)
			case tc.wantErr != "" && errors.Is(err, context.Canceled):
				t.Fatalf("wait: %v; want a timeout", err)
			}
			if reads.Load() < 2 {
				t.Fatalf("the status was read %d times", reads.Load())
			}
		})
	}
}
