package gateway

import (
	"encoding/json"
	"testing"

	"sigs.k8s.io/yaml"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/rules"
	"sless.dev/sless/rules/rulestest"
)

// openapiLimits is every limit and default openapi.yaml's schemas state, each with the rule
// the API enforces: the document can only hold literals. A limit added to a schema fails the
// test until it is here. Literals are bounds sless does not decide: a percent, a rate, "not
// negative", "at least one".
var openapiLimits = map[string]any{
	"FunctionFields entrypoint maxLength":              buildkit.MaxEntrypointLength,
	"FunctionFields env_vars maxLength":                rules.MaxEnvValueBytes,
	"FunctionFields env_vars maxProperties":            rules.MaxEnvVars,
	"FunctionFields memory_mb default":                 rules.DefaultMemoryMB,
	"FunctionFields memory_mb minimum":                 rules.MinMemoryMB,
	"FunctionFields memory_mb maximum":                 rules.MaxMemoryMB,
	"FunctionFields timeout_sec minimum":               0,
	"FunctionFields timeout_sec maximum":               rules.MaxTimeoutSeconds,
	"FunctionFields min_replicas default":              0,
	"FunctionFields min_replicas minimum":              0,
	"FunctionFields min_replicas maximum":              rules.MaxReplicas,
	"FunctionFields max_replicas default":              rules.DefaultMaxReplicas,
	"FunctionFields max_replicas minimum":              1,
	"FunctionFields max_replicas maximum":              rules.MaxReplicas,
	"FunctionFields scale_down_period_sec default":     rules.DefaultScaleDownSeconds,
	"FunctionFields scale_down_period_sec minimum":     rules.MinScaleDownSeconds,
	"FunctionFields scale_down_period_sec maximum":     rules.MaxScaleDownSeconds,
	"FunctionFields scaling_metric default":            rules.DefaultScalingMetric,
	"FunctionFields scaling_target default":            rules.DefaultScalingTarget,
	"FunctionFields scaling_target minimum":            1,
	"FunctionFields scaling_target maximum":            rules.MaxScalingTarget,
	"FunctionFields stream_idle_timeout_sec default":   rules.DefaultStreamIdleSeconds,
	"FunctionFields stream_idle_timeout_sec minimum":   rules.MinStreamIdleSeconds,
	"FunctionFields stream_idle_timeout_sec maximum":   rules.MaxStreamIdleSeconds,
	"FunctionFields image maxLength":                   rules.MaxImageLength,
	"FunctionFields protocol default":                  rules.DefaultProtocol,
	"FunctionFields secret_env maxItems":               rules.MaxSecretRefs,
	"FunctionFields secret_env.secret maxLength":       rules.MaxNameLength,
	"FunctionFields secret_env.key maxLength":          rules.MaxSecretKeyLength,
	"FunctionFields secret_files maxItems":             rules.MaxSecretRefs,
	"FunctionFields secret_files.secret maxLength":     rules.MaxNameLength,
	"FunctionFields secret_files.path maxLength":       rules.MaxSecretPathLength,
	"FunctionFields async.enabled default":             false,
	"FunctionFields async.max_attempts default":        rules.DefaultMaxAttempts,
	"FunctionFields async.max_attempts minimum":        1,
	"FunctionFields async.max_attempts maximum":        rules.MaxAttempts,
	"FunctionFields async.backoff_ms default":          rules.DefaultBackoffMillis,
	"FunctionFields async.backoff_ms minimum":          0,
	"FunctionFields async.backoff_ms maximum":          rules.MaxBackoffMillis,
	"FunctionFields async.dead_letter_queue maxLength": rules.MaxQueueLength,
	"FunctionFields async.max_jobs default":            rules.DefaultAsyncJobs,
	"FunctionFields async.max_jobs minimum":            1,
	"FunctionFields async.max_jobs maximum":            rules.MaxAsyncJobs,
	"FunctionFields traffic default":                   rules.DefaultTraffic(),
	"FunctionFields traffic minItems":                  1,
	"FunctionFields traffic maxItems":                  rules.MaxTrafficTargets,
	"FunctionFields revision_history_limit default":    rules.DefaultRevisionHistoryLimit,
	"FunctionFields revision_history_limit minimum":    1,
	"FunctionFields revision_history_limit maximum":    rules.MaxRevisionHistoryLimit,
	"FunctionFields rollout.steps minItems":            1,
	"FunctionFields rollout.steps maxItems":            rules.MaxRolloutSteps,
	"FunctionFields rollout.steps minimum":             1,
	"FunctionFields rollout.steps maximum":             100,
	"FunctionFields rollout.interval_sec minimum":      1,
	"FunctionFields rollout.interval_sec maximum":      rules.MaxRolloutIntervalSec,
	"FunctionFields rollout.max_error_rate minimum":    0,
	"FunctionFields rollout.max_error_rate maximum":    1,
	"FunctionFields rollout.min_requests minimum":      0,
	"FunctionFields rollout.min_requests maximum":      rules.MaxRolloutMinRequests,
	"TrafficTarget percent minimum":                    0,
	"TrafficTarget percent maximum":                    100,
	"TrafficTarget tag maxLength":                      rules.MaxTagLength,
	"TriggerFields enabled default":                    true,
	"TriggerFields prewarm_seconds minimum":            0,
	"TriggerFields prewarm_seconds maximum":            rules.MaxPrewarmSeconds,
	"TriggerFields broker_secret_key default":          rules.DefaultBrokerSecretKey,
	"TriggerFields max_attempts default":               rules.DefaultMaxAttempts,
	"TriggerFields max_attempts minimum":               1,
	"TriggerFields max_attempts maximum":               rules.MaxAttempts,
	"TriggerFields backoff_ms default":                 rules.DefaultBackoffMillis,
	"TriggerFields backoff_ms minimum":                 0,
	"TriggerFields backoff_ms maximum":                 rules.MaxBackoffMillis,
	"JobFields env_vars maxLength":                     rules.MaxEnvValueBytes,
	"JobFields env_vars maxProperties":                 rules.MaxEnvVars,
	"JobFields memory_mb minimum":                      rules.MinMemoryMB,
	"JobFields memory_mb maximum":                      rules.MaxMemoryMB,
	"JobFields timeout_sec minimum":                    0,
	"JobFields timeout_sec maximum":                    rules.MaxTimeoutSeconds,
	"JobFields run_id minimum":                         0,
}

// TestOpenAPILimitsMatch: every limit and default of every schema in openapi.yaml says what
// the rules say, and none is left out of openapiLimits.
func TestOpenAPILimitsMatch(t *testing.T) {
	var doc struct {
		Components struct{ Schemas map[string]any }
	}
	if err := yaml.Unmarshal(openapiSpec, &doc); err != nil {
		t.Fatalf("openapi.yaml does not parse: %v", err)
	}
	seen := map[string]bool{}
	for name, schema := range doc.Components.Schemas {
		rulestest.SchemaLimits(schema, func(path, keyword string, got any) {
			key := name + " " + path + " " + keyword
			seen[key] = true
			want, ok := openapiLimits[key]
			if !ok {
				t.Errorf("openapi.yaml: %s = %v is not in openapiLimits: name the rule it repeats", key, got)
				return
			}
			// As JSON: the document's numbers come as int64 and the rules' as int or int32, its
			// traffic default as a list of maps and the rule's as one of structs.
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			if string(g) != string(w) {
				t.Errorf("openapi.yaml: %s = %s, the rules say %s", key, g, w)
			}
		})
	}
	for key := range openapiLimits {
		if !seen[key] {
			t.Errorf("openapiLimits has %q, which openapi.yaml does not state", key)
		}
	}
}
