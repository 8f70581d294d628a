package gateway

import (
	"maps"
	"slices"
	"strings"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
	"sless.dev/sless/triggers"
)

// validName checks a namespace or object name: a DNS-1123 label.
func validName(field, name string) error {
	if err := rules.CheckName(name); err != nil {
		return invalid(field, "%v", err)
	}
	return nil
}

func validRuntime(field, rt string) error {
	if !slices.Contains(api.Runtimes, rt) {
		return invalid(field, "unknown runtime %q; use one of %s", rt, strings.Join(api.Runtimes, ", "))
	}
	return nil
}

// validQueue checks a RabbitMQ queue name (rules.CheckQueue).
func validQueue(field, q string, required bool) error {
	if err := rules.CheckQueue(field, q, required); err != nil {
		return invalid(err.Field, "%s", err.Reason)
	}
	return nil
}

// tenantQueues refuses a set queue name (field, name pairs) outside namespace ns's own
// names: a tenant's queues (its async dead letters, its event triggers') may be on a broker
// other tenants use too, and a name of theirs would take or poison their messages.
func tenantQueues(ns string, queues [][2]string) error {
	prefix := rules.QueuePrefix(ns)
	for _, q := range queues {
		if q[1] != "" && !strings.HasPrefix(q[1], prefix) {
			return invalid(q[0], "%q is not one of this tenant's queue names: name it %s<name> (e.g. %sorders)", q[1], prefix, prefix)
		}
	}
	return nil
}

func inRange(field string, v, lo, hi int64) error {
	if err := rules.CheckRange(field, v, lo, hi); err != nil {
		return invalid(err.Field, "%s", err.Reason)
	}
	return nil
}

func validTimeout(field string, v int32) error {
	if v < 0 || v > rules.MaxTimeoutSeconds {
		return invalid(field, "%d is out of range; use 1-%d seconds, or 0 for no limit", v, rules.MaxTimeoutSeconds)
	}
	return nil
}

func validEnv(field string, env map[string]string) error {
	if len(env) > rules.MaxEnvVars {
		return invalid(field, "%d variables; at most %d are allowed", len(env), rules.MaxEnvVars)
	}
	total := 0
	for _, k := range slices.Sorted(maps.Keys(env)) {
		v := env[k]
		switch {
		case rules.CheckEnvName(k) != nil:
			return invalid(field+"."+k, "%v", rules.CheckEnvName(k))
		case strings.IndexByte(v, 0) >= 0:
			return invalid(field+"."+k, "the value contains a NUL byte, which no process environment can hold; remove it")
		case len(v) > rules.MaxEnvValueBytes:
			return invalid(field+"."+k, "the value is %d bytes; at most %d are allowed (keep large data in a file of the upload or in storage)", len(v), rules.MaxEnvValueBytes)
		}
		total += len(k) + len(v)
	}
	if total > rules.MaxEnvTotalBytes {
		return invalid(field, "the variables hold %d bytes in all; at most %d are allowed", total, rules.MaxEnvTotalBytes)
	}
	return nil
}

// validEntrypoint checks ep's form for runtime ("" runtime: a job of an existing function,
// which runs that function's entrypoint) with the message an upload would give.
func validEntrypoint(field, runtime, ep string) error {
	if ep == "" {
		return nil
	}
	if runtime != "" {
		if _, err := buildkit.NormalizeEntrypoint(runtime, ep); err != nil {
			return invalid(field, "%v", err)
		}
		return nil
	}
	if len(ep) > buildkit.MaxEntrypointLength || !buildkit.EntrypointPattern.MatchString(ep) {
		return invalid(field, "invalid entrypoint %q: use the form of the function's runtime: handler.handle for Python and Node.js, Handle for Go", ep)
	}
	return nil
}

// defaultFunctionSpec holds the defaults of a new function (api.FunctionSpec.Default).
func defaultFunctionSpec() api.FunctionSpec {
	var s api.FunctionSpec
	s.Default()
	return s
}

// applyFunctionFields sets the sent fields of f on spec, after its defaults: a stored spec
// without a field takes its default, a field sent as zero stays for validation to refuse.
func applyFunctionFields(spec *api.FunctionSpec, f api.FunctionFields) {
	spec.Default()
	setIf(&spec.Runtime, f.Runtime)
	setIf(&spec.Entrypoint, f.Entrypoint)
	setIf(&spec.EnvVars, f.EnvVars)
	setIf(&spec.MemoryMB, f.MemoryMB)
	setIf(&spec.TimeoutSec, f.TimeoutSec)
	setIf(&spec.MinReplicas, f.MinReplicas)
	setIf(&spec.MaxReplicas, f.MaxReplicas)
	setIf(&spec.ScaleDownPeriodSec, f.ScaleDownPeriodSec)
	setIf(&spec.ScalingMetric, f.ScalingMetric)
	setIf(&spec.ScalingTarget, f.ScalingTarget)
	setIf(&spec.StreamIdleTimeoutSec, f.StreamIdleTimeoutSec)
	setIf(&spec.Image, f.Image)
	setIf(&spec.Protocol, f.Protocol)
	setIf(&spec.SecretEnv, f.SecretEnv)
	setIf(&spec.SecretFiles, f.SecretFiles)
	setIf(&spec.Traffic, f.Traffic)
	setIf(&spec.RevisionHistoryLimit, f.RevisionHistoryLimit)
	if r := f.Rollout; r != nil {
		spec.Rollout = nil
		if len(r.Steps) > 0 {
			spec.Rollout = &api.Rollout{Steps: slices.Clone(r.Steps), IntervalSec: r.IntervalSec, MaxErrorRate: r.MaxErrorRate, MinRequests: r.MinRequests}
		}
	}
	if a := f.Async; a != nil {
		setIf(&spec.Async.Enabled, a.Enabled)
		setIf(&spec.Async.MaxAttempts, a.MaxAttempts)
		setIf(&spec.Async.BackoffMs, a.BackoffMs)
		setIf(&spec.Async.DeadLetterQueue, a.DeadLetterQueue)
		setIf(&spec.Async.MaxJobs, a.MaxJobs)
	}
}

func setIf[T any](dst *T, src *T) {
	if src != nil {
		*dst = *src
	}
}

// validateFunctionSpec checks a complete spec.
func validateFunctionSpec(s api.FunctionSpec) error {
	checks := []error{
		validRuntime("runtime", s.Runtime),
		validEntrypoint("entrypoint", s.Runtime, s.Entrypoint),
		validEnv("env_vars", s.EnvVars),
		inRange("memory_mb", int64(s.MemoryMB), rules.MinMemoryMB, rules.MaxMemoryMB),
		validTimeout("timeout_sec", s.TimeoutSec),
		inRange("min_replicas", int64(s.MinReplicas), 0, rules.MaxReplicas),
		inRange("max_replicas", int64(s.MaxReplicas), 1, rules.MaxReplicas),
		inRange("scale_down_period_sec", int64(s.ScaleDownPeriodSec), 1, rules.MaxScaleDownSeconds),
		inRange("scaling_target", int64(s.ScalingTarget), 1, rules.MaxScalingTarget),
		inRange("stream_idle_timeout_sec", int64(s.StreamIdleTimeoutSec), rules.MinStreamIdleSeconds, rules.MaxStreamIdleSeconds),
		inRange("async.max_attempts", int64(s.Async.MaxAttempts), 1, rules.MaxAttempts),
		inRange("async.backoff_ms", int64(s.Async.BackoffMs), 0, rules.MaxBackoffMillis),
		validQueue("async.dead_letter_queue", s.Async.DeadLetterQueue, false),
		inRange("async.max_jobs", int64(s.Async.MaxJobs), 1, rules.MaxAsyncJobs),
		inRange("revision_history_limit", int64(s.RevisionHistoryLimit), 1, rules.MaxRevisionHistoryLimit),
	}
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	if s.MaxReplicas < s.MinReplicas {
		return invalid("max_replicas", "%d is below min_replicas %d", s.MaxReplicas, s.MinReplicas)
	}
	if s.ScalingMetric != "concurrency" && s.ScalingMetric != "requestRate" {
		return invalid("scaling_metric", "unknown metric %q; use concurrency or requestRate", s.ScalingMetric)
	}
	if len(s.Image) > rules.MaxImageLength {
		return invalid("image", "longer than %d characters", rules.MaxImageLength)
	}
	if p := rules.ProtocolProblem(s.Protocol, s.Image); p != "" {
		return invalid("protocol", "%s", p)
	}
	return nil
}

// defaultTriggerSpec holds the defaults of a new trigger of type typ.
func defaultTriggerSpec(typ string) api.TriggerSpec {
	s := api.TriggerSpec{Type: typ, Enabled: true}
	if k, ok := triggers.Lookup(typ); ok {
		k.Default(&s)
	}
	return s
}

// applyTriggerFields sets the sent fields of f on spec; the type cannot change.
func applyTriggerFields(spec *api.TriggerSpec, f api.TriggerFields) error {
	if f.Type != nil && *f.Type != spec.Type {
		return invalid("type", "%s (it is %s)", rules.TriggerTypeImmutable, spec.Type)
	}
	setIf(&spec.Function, f.Function)
	setIf(&spec.Enabled, f.Enabled)
	triggers.Apply(spec, f)
	return nil
}

// validateTriggerSpec checks a complete spec: the fields of its kind are set and valid (the
// kind's own rules), the fields only other kinds take are not set.
func validateTriggerSpec(s api.TriggerSpec) error {
	if err := validName("function", s.Function); err != nil {
		return err
	}
	k, ok := triggers.Lookup(s.Type)
	if !ok {
		return invalid("type", "unknown trigger type %q; use %s", s.Type, triggers.Names())
	}
	if f := triggers.Misplaced(s); f != "" {
		return invalid(f, "%s", k.Takes())
	}
	if err := k.Validate(s); err != nil {
		return invalid(err.Field, "%s", err.Reason)
	}
	return nil
}

// applyJobFields sets the sent fields of f on spec.
func applyJobFields(spec *api.JobSpec, f api.JobFields) {
	setIf(&spec.Function, f.Function)
	setIf(&spec.Runtime, f.Runtime)
	setIf(&spec.Entrypoint, f.Entrypoint)
	setIf(&spec.EnvVars, f.EnvVars)
	setIf(&spec.MemoryMB, f.MemoryMB)
	setIf(&spec.TimeoutSec, f.TimeoutSec)
	setIf(&spec.Image, f.Image)
	setIf(&spec.Event, f.Event)
	setIf(&spec.RunID, f.RunID)
}

// validateJobSpec checks a complete spec: it runs a function or carries its own code.
func validateJobSpec(s api.JobSpec) error {
	switch {
	case s.Function != "" && s.Runtime != "":
		return invalid("runtime", "set either function (run an existing function) or runtime (a self-contained job: upload its code or give an image), not both")
	case s.Function != "":
		if s.Image != "" {
			return invalid("image", "a job with function runs that function's image; remove image")
		}
		if err := validName("function", s.Function); err != nil {
			return err
		}
	case s.Runtime != "":
		if err := validRuntime("runtime", s.Runtime); err != nil {
			return err
		}
	default:
		return invalid("function", "set function (run an existing function) or runtime (a self-contained job)")
	}
	if s.MemoryMB != 0 {
		if err := inRange("memory_mb", int64(s.MemoryMB), rules.MinMemoryMB, rules.MaxMemoryMB); err != nil {
			return err
		}
	}
	if s.RunID < 0 {
		return invalid("run_id", "%d is negative; use 0 (create without running) or a higher number to run again", s.RunID)
	}
	for _, err := range []error{validEntrypoint("entrypoint", s.Runtime, s.Entrypoint), validEnv("env_vars", s.EnvVars), validTimeout("timeout_sec", s.TimeoutSec)} {
		if err != nil {
			return err
		}
	}
	return nil
}
