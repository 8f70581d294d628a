package devplane

import (
	"fmt"
	"testing"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/gateway/backend/backendtest"
	"sless.dev/sless/rules"
	"sless.dev/sless/rules/rulestest"
)

// TestReadinessTable: a local function whose build and deploy stand as a row's steps shows
// what the row wants — the table the cluster's tests run too.
func TestReadinessTable(t *testing.T) {
	rulestest.RunReadiness(t, func(t *testing.T, row rulestest.Readiness) rulestest.View {
		r := &functionRecord{meta: meta{Namespace: "team-a", Name: "hello", Generation: row.Generation}, ObservedGeneration: row.ObservedGeneration}
		markSteps(&r.Status.FunctionStatus, row.Steps...)
		st := functionOf(r).Status
		return rulestest.View{Ready: st.Ready, Phase: st.Phase, Message: st.Message}
	})
}

// TestRouteTable: the route /fn/ takes for a local function and its http triggers — the
// table the cluster's tests run too, but for the rows that need a dispatcher that is not
// draining yet (sless dev drains asynchronous calls itself).
func TestRouteTable(t *testing.T) {
	backendtest.RunRoutes(t, false, func(t *testing.T, row backendtest.Route) backend.Route {
		const key = "team-a/hello"
		spec := api.FunctionSpec{TimeoutSec: row.TimeoutSec, StreamIdleTimeoutSec: row.StreamIdleSec, MemoryMB: row.MemoryMB, Async: api.AsyncPolicy{Enabled: row.Async.Enabled, MaxAttempts: row.Async.MaxAttempts}}
		snap := &snapshot{functions: map[string]*functionRecord{key: {meta: meta{Namespace: "team-a", Name: "hello"}, Spec: spec}},
			triggers: map[string]*triggerRecord{"team-a/tick": {Spec: api.TriggerSpec{Type: api.TriggerCron, Function: "hello"}}}}
		for i, h := range row.Triggers {
			snap.triggers[fmt.Sprint("team-a/http-", i)] = &triggerRecord{meta: meta{Namespace: "team-a"},
				Spec: api.TriggerSpec{Type: api.TriggerHTTP, Function: "hello", Enabled: h.Enabled, RequireAuth: h.RequireAuth}}
		}
		return routesOf(snap, func(*functionRecord) []backend.RouteTarget {
			return []backend.RouteTarget{{ResolvedTarget: rules.ResolvedTarget{Revision: "hello-1", Latest: true, Percent: 100}, Host: row.Host}}
		})[key]
	})
}
