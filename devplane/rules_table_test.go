package devplane

import (
	"fmt"
	"testing"
	"time"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules/rulestest"
)

// TestReadinessTable: a local function whose build and deploy stand as a row's steps shows
// what the row wants — the table the cluster's tests run too.
func TestReadinessTable(t *testing.T) {
	for _, tc := range rulestest.ReadinessTable(t) {
		t.Run(tc.Name, func(t *testing.T) {
			r := &functionRecord{meta: meta{Namespace: "team-a", Name: "hello", Generation: tc.Generation}, ObservedGeneration: tc.ObservedGeneration}
			markSteps(&r.Status, tc.Steps...)
			got := functionOf(r).Status
			if got.Ready != tc.Want.Ready || got.Phase != tc.Want.Phase || got.Message != tc.Want.Message {
				t.Errorf("got ready %v, phase %q, message %q; want %+v", got.Ready, got.Phase, got.Message, tc.Want)
			}
		})
	}
}

// TestRouteTable: the route /fn/ takes for a local function and its http triggers — the
// table the cluster's tests run too, but for the rows that need a dispatcher that is not
// draining yet (sless dev drains asynchronous calls itself).
func TestRouteTable(t *testing.T) {
	for _, tc := range rulestest.RouteTable(t) {
		if tc.ClusterOnly {
			continue
		}
		t.Run(tc.Name, func(t *testing.T) {
			const key = "team-a/hello"
			spec := api.FunctionSpec{TimeoutSec: tc.TimeoutSec, Async: api.AsyncPolicy{Enabled: tc.Async.Enabled, MaxAttempts: tc.Async.MaxAttempts}}
			snap := &snapshot{functions: map[string]*functionRecord{key: {meta: meta{Namespace: "team-a", Name: "hello"}, Spec: spec}},
				triggers: map[string]*triggerRecord{"team-a/tick": {Spec: api.TriggerSpec{Type: api.TriggerCron, Function: "hello"}}}}
			for i, h := range tc.Triggers {
				snap.triggers[fmt.Sprint("team-a/http-", i)] = &triggerRecord{meta: meta{Namespace: "team-a"},
					Spec: api.TriggerSpec{Type: api.TriggerHTTP, Function: "hello", Enabled: h.Enabled, RequireAuth: h.RequireAuth}}
			}
			got := routesOf(snap, func(string) string { return tc.Host })[key]
			w := tc.Want
			if got.Host != w.Host || got.Timeout != time.Duration(w.TimeoutSec)*time.Second || got.RequireAuth != w.RequireAuth || got.Disabled != w.Disabled || got.AsyncAttempts != w.AsyncAttempts {
				t.Errorf("got %+v, want %+v", got, w)
			}
		})
	}
}
