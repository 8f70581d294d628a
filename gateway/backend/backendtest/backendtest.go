// Package backendtest holds the tables both control planes' tests run, so that the cluster
// and `sless dev` cannot disagree about the route /fn/ takes for a function
// (backend.RouteOf) or about what the API answers for a trigger (RunTriggerSources).
package backendtest

import (
	_ "embed"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"sless.dev/sless/gateway/backend"
)

//go:embed routes.json
var routesJSON []byte

// HTTPTrigger is one http trigger of a Route row's function.
type HTTPTrigger struct{ Enabled, RequireAuth bool }

// Route is a function (its routing host, timeout, stream idle bound, memory, http triggers and
// async policy, and whether a dispatcher drains its asynchronous calls) and the route /fn/ takes
// for it. ClusterOnly rows need a state `sless dev` does not have.
type Route struct {
	Name          string
	Host          string
	TimeoutSec    int32
	StreamIdleSec int32
	MemoryMB      int32
	Triggers      []HTTPTrigger
	Async         struct {
		Enabled, Draining bool
		MaxAttempts       int32
	}
	ClusterOnly bool
	Want        struct {
		Host                  string
		TimeoutSec            int32
		StreamIdleSec         int32
		MemoryMB              int32
		RequireAuth, Disabled bool
		AsyncAttempts         int
	}
}

// RouteTable is routes.json.
func RouteTable(t testing.TB) []Route {
	t.Helper()
	var rows []Route
	if err := json.Unmarshal(routesJSON, &rows); err != nil {
		t.Fatalf("routes.json: %v", err)
	}
	return rows
}

// RunRoutes runs every row of RouteTable through route, one control plane's route for the
// row's function, and checks it against the row; a plane without the state of ClusterOnly
// rows passes clusterOnly false.
func RunRoutes(t *testing.T, clusterOnly bool, route func(t *testing.T, row Route) backend.Route) {
	for _, row := range RouteTable(t) {
		if row.ClusterOnly && !clusterOnly {
			continue
		}
		t.Run(row.Name, func(t *testing.T) {
			w := row.Want
			want := backend.Route{Host: w.Host, Timeout: time.Duration(w.TimeoutSec) * time.Second,
				StreamIdle: time.Duration(w.StreamIdleSec) * time.Second, MemoryMB: w.MemoryMB, RequireAuth: w.RequireAuth, Disabled: w.Disabled, AsyncAttempts: w.AsyncAttempts}
			got := route(t, row)
			// A plane with revisions routes by Targets: one target at 100 % is the row's host.
			if len(got.Targets) == 1 && got.Targets[0].Percent == 100 {
				got.Host, got.Targets = got.Targets[0].Host, nil
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %+v, want %+v", got, want)
			}
		})
	}
}
