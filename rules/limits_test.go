package rules_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/rules"
	"sless.dev/sless/rules/rulestest"
)

// crdMarkers is every limit and default the CRDs state, each with the rule it repeats: the
// markers can only hold literals. A marker added to a CRD fails the test until it is here.
// Literals are limits sless does not decide: Kubernetes' own Condition type, the source keys
// the gateway writes itself, and "not empty".
var crdMarkers = map[string]any{
	"functions spec.entrypoint maxLength":                 buildkit.MaxEntrypointLength,
	"functions spec.env maxProperties":                    rules.MaxEnvVars,
	"functions spec.image maxLength":                      rules.MaxImageLength,
	"functions spec.memoryMB default":                     rules.DefaultMemoryMB,
	"functions spec.memoryMB minimum":                     rules.MinMemoryMB,
	"functions spec.memoryMB maximum":                     rules.MaxMemoryMB,
	"functions spec.timeoutSeconds minimum":               0,
	"functions spec.timeoutSeconds maximum":               rules.MaxTimeoutSeconds,
	"functions spec.scale.minReplicas default":            0,
	"functions spec.scale.minReplicas minimum":            0,
	"functions spec.scale.minReplicas maximum":            rules.MaxReplicas,
	"functions spec.scale.maxReplicas default":            rules.DefaultMaxReplicas,
	"functions spec.scale.maxReplicas minimum":            1,
	"functions spec.scale.maxReplicas maximum":            rules.MaxReplicas,
	"functions spec.scale.scaleDownPeriodSeconds default": rules.DefaultScaleDownSeconds,
	"functions spec.scale.scaleDownPeriodSeconds minimum": rules.MinScaleDownSeconds,
	"functions spec.scale.scaleDownPeriodSeconds maximum": rules.MaxScaleDownSeconds,
	"functions spec.streamIdleTimeoutSeconds default":     rules.DefaultStreamIdleSeconds,
	"functions spec.streamIdleTimeoutSeconds minimum":     rules.MinStreamIdleSeconds,
	"functions spec.streamIdleTimeoutSeconds maximum":     rules.MaxStreamIdleSeconds,
	"functions spec.scale.metric default":                 rules.DefaultScalingMetric,
	"functions spec.scale.target default":                 rules.DefaultScalingTarget,
	"functions spec.scale.target minimum":                 1,
	"functions spec.scale.target maximum":                 rules.MaxScalingTarget,
	"functions spec.async.deadLetterQueue maxLength":      rules.MaxQueueLength,
	"functions spec.async.maxJobs default":                rules.DefaultAsyncJobs,
	"functions spec.async.maxJobs minimum":                1,
	"functions spec.async.maxJobs maximum":                rules.MaxAsyncJobs,
	"functions spec.async.retry.maxAttempts default":      rules.DefaultMaxAttempts,
	"functions spec.async.retry.maxAttempts minimum":      1,
	"functions spec.async.retry.maxAttempts maximum":      rules.MaxAttempts,
	"functions spec.async.retry.backoffMillis default":    rules.DefaultBackoffMillis,
	"functions spec.async.retry.backoffMillis minimum":    0,
	"functions spec.async.retry.backoffMillis maximum":    rules.MaxBackoffMillis,
	"functions spec.source.archiveKey maxLength":          1024,
	"functions spec.source.contextKey maxLength":          1024,
	"functions spec.source.contextKey minLength":          1,
	"triggers spec.functionRef.name minLength":            1,
	"triggers spec.functionRef.name maxLength":            rules.MaxNameLength,
	"functionjobs spec.functionRef.name minLength":        1,
	"functionjobs spec.functionRef.name maxLength":        rules.MaxNameLength,
	"functionjobs spec.entrypoint maxLength":              buildkit.MaxEntrypointLength,
	"functionjobs spec.env maxProperties":                 rules.MaxEnvVars,
	"functionjobs spec.image maxLength":                   rules.MaxImageLength,
	"functionjobs spec.memoryMB default":                  rules.DefaultMemoryMB,
	"functionjobs spec.memoryMB minimum":                  rules.MinMemoryMB,
	"functionjobs spec.memoryMB maximum":                  rules.MaxMemoryMB,
	"functionjobs spec.timeoutSeconds minimum":            0,
	"functionjobs spec.timeoutSeconds maximum":            rules.MaxTimeoutSeconds,
	"functionjobs spec.runID default":                     0,
	"functionjobs spec.runID minimum":                     0,
	"functionjobs spec.source.archiveKey maxLength":       1024,
	"functionjobs spec.source.contextKey maxLength":       1024,
	"functionjobs spec.source.contextKey minLength":       1,
	"functions spec.secretEnv maxItems":                   rules.MaxSecretRefs,
	"functions spec.secretEnv.name minLength":             1,
	"functions spec.secretEnv.secret minLength":           1,
	"functions spec.secretEnv.secret maxLength":           rules.MaxNameLength,
	"functions spec.secretEnv.key minLength":              1,
	"functions spec.secretEnv.key maxLength":              rules.MaxSecretKeyLength,
	"functions spec.secretFiles maxItems":                 rules.MaxSecretRefs,
	"functions spec.secretFiles.secret minLength":         1,
	"functions spec.secretFiles.secret maxLength":         rules.MaxNameLength,
	"functions spec.secretFiles.path maxLength":           rules.MaxSecretPathLength,
	"functionjobs spec.secretEnv maxItems":                rules.MaxSecretRefs,
	"functionjobs spec.secretEnv.name minLength":          1,
	"functionjobs spec.secretEnv.secret minLength":        1,
	"functionjobs spec.secretEnv.secret maxLength":        rules.MaxNameLength,
	"functionjobs spec.secretEnv.key minLength":           1,
	"functionjobs spec.secretEnv.key maxLength":           rules.MaxSecretKeyLength,
	"functionjobs spec.secretFiles maxItems":              rules.MaxSecretRefs,
	"functionjobs spec.secretFiles.secret minLength":      1,
	"functionjobs spec.secretFiles.secret maxLength":      rules.MaxNameLength,
	"functionjobs spec.secretFiles.path maxLength":        rules.MaxSecretPathLength,
	"triggers spec.enabled default":                       true,
	"triggers spec.cron.schedule minLength":               1,
	"triggers spec.cron.schedule maxLength":               rules.MaxScheduleLength,
	"triggers spec.cron.timezone maxLength":               rules.MaxTimezoneLength,
	"triggers spec.cron.concurrencyPolicy default":        rules.DefaultConcurrencyPolicy,
	"triggers spec.cron.prewarmSeconds minimum":           0,
	"triggers spec.cron.prewarmSeconds maximum":           rules.MaxPrewarmSeconds,
	"triggers spec.cron.startingDeadlineSeconds default":  rules.DefaultStartingDeadlineSeconds,
	"triggers spec.cron.startingDeadlineSeconds minimum":  1,
	"triggers spec.event.queue minLength":                 1,
	"triggers spec.event.queue maxLength":                 rules.MaxQueueLength,
	"triggers spec.event.deadLetterQueue maxLength":       rules.MaxQueueLength,
	"triggers spec.event.brokerSecretRef.name minLength":  1,
	"triggers spec.event.brokerSecretRef.name maxLength":  rules.MaxSecretNameLength,
	"triggers spec.event.brokerSecretRef.key default":     rules.DefaultBrokerSecretKey,
	"triggers spec.event.retry.maxAttempts default":       rules.DefaultMaxAttempts,
	"triggers spec.event.retry.maxAttempts minimum":       1,
	"triggers spec.event.retry.maxAttempts maximum":       rules.MaxAttempts,
	"triggers spec.event.retry.backoffMillis default":     rules.DefaultBackoffMillis,
	"triggers spec.event.retry.backoffMillis minimum":     0,
	"triggers spec.event.retry.backoffMillis maximum":     rules.MaxBackoffMillis,
	"triggers spec.event.queueLength default":             rules.DefaultEventQueueLength,
	"triggers spec.event.queueLength minimum":             1,
	"triggers spec.event.maxJobs default":                 rules.DefaultEventJobs,
	"triggers spec.event.maxJobs minimum":                 1,
	"triggers spec.event.maxJobs maximum":                 rules.MaxEventJobs,
	"functions spec.traffic maxItems":                     rules.MaxTrafficTargets,
	"functions spec.traffic.percent minimum":              0,
	"functions spec.traffic.percent maximum":              100,
	"functions spec.traffic.revision maxLength":           rules.MaxNameLength,
	"functions spec.traffic.tag maxLength":                rules.MaxTagLength,
	"functions spec.revisionHistoryLimit default":         rules.DefaultRevisionHistoryLimit,
	"functions spec.revisionHistoryLimit minimum":         0,
	"functions spec.revisionHistoryLimit maximum":         rules.MaxRevisionHistoryLimit,
	"functions spec.rollout.steps minItems":               1,
	"functions spec.rollout.steps maxItems":               rules.MaxRolloutSteps,
	"functions spec.rollout.intervalSeconds minimum":      1,
	"functions spec.rollout.intervalSeconds maximum":      rules.MaxRolloutIntervalSec,
	"functions spec.rollout.minRequests minimum":          0,
	"revisions spec.function minLength":                   1,
	"revisions spec.function maxLength":                   rules.MaxNameLength,
	"revisions spec.number minimum":                       1,
	"* status.conditions.message maxLength":               32768,
	"* status.conditions.observedGeneration minimum":      0,
	"* status.conditions.reason maxLength":                1024,
	"* status.conditions.reason minLength":                1,
	"* status.conditions.type maxLength":                  316,
}

// A revision snapshots the code spec a self-contained FunctionJob has too (without its run
// and function reference): the same markers.
func init() {
	for key, v := range crdMarkers {
		if rest, ok := strings.CutPrefix(key, "functionjobs spec."); ok && !strings.HasPrefix(rest, "runID") && !strings.HasPrefix(rest, "functionRef") {
			crdMarkers["revisions spec."+rest] = v
		}
	}
}

// TestCRDMarkersMatch: every limit and default in every CRD says what the rules say, and
// none is left out of crdMarkers.
func TestCRDMarkersMatch(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "config", "crd", "bases", "sless.dev_*.yaml"))
	if err != nil || len(files) != 4 {
		t.Fatalf("CRDs: %v %v", files, err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := yaml.Unmarshal(data, &doc); err != nil {
			t.Fatal(err)
		}
		crd := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "sless.dev_"), ".yaml")
		rulestest.SchemaLimits(doc, func(path, keyword string, got any) {
			key := crd + " " + path + " " + keyword
			if strings.HasPrefix(path, "status.conditions.") {
				key = "* " + path + " " + keyword
			}
			seen[key] = true
			want, ok := crdMarkers[key]
			if !ok {
				t.Errorf("%s: %s %s = %v is not in crdMarkers: name the rule it repeats", crd, path, keyword, got)
				return
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: %s %s = %v, the rules say %v", crd, path, keyword, got, want)
			}
		})
	}
	for key := range crdMarkers {
		if !seen[key] {
			t.Errorf("crdMarkers has %q, which no CRD states", key)
		}
	}
}

// TestCRDTriggerTypeImmutable: the CRD's CEL rule refuses a type change with the API's words.
func TestCRDTriggerTypeImmutable(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "config", "crd", "bases", "sless.dev_triggers.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "message: "+rules.TriggerTypeImmutable) {
		t.Errorf("sless.dev_triggers.yaml has no CEL rule with the message %q", rules.TriggerTypeImmutable)
	}
}
