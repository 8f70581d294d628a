package scaling

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// Labels put on everything sless renders, so objects can be found per function, trigger or job.
const (
	LabelManagedBy         = "app.kubernetes.io/managed-by"
	LabelFunction          = "sless.dev/function"
	LabelRevision          = "sless.dev/revision"
	LabelFunctionNamespace = "sless.dev/function-namespace"
	LabelTrigger           = "sless.dev/trigger"
	LabelJob               = "sless.dev/job"
	LabelSource            = "sless.dev/source"
	managedBy              = "sless"
)

// Annotations KEDA and the HTTP add-on read. HTTPScaledObject annotations are copied onto the
// ScaledObject the add-on generates, so the paused-replicas annotation freezes it at zero.
const (
	AnnotationPausedReplicas = "autoscaling.keda.sh/paused-replicas"
	AnnotationPaused         = "autoscaling.keda.sh/paused"
)

// Name limits: DNS labels for most objects, 52 for CronJobs (the controller appends 11
// characters for the Jobs it creates).
const (
	maxNameLength        = 63
	maxCronJobNameLength = 52
)

// childName joins parts with '-' and, when the result exceeds max, keeps a prefix and
// appends a hash of the full name so distinct inputs stay distinct and names are stable.
func childName(max int, parts ...string) string {
	name := strings.Join(parts, "-")
	if len(name) <= max {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	suffix := hex.EncodeToString(sum[:])[:10]
	return strings.TrimRight(name[:max-len(suffix)-1], "-") + "-" + suffix
}

// BuildJobName names the build of one source of one function (or self-contained job): the
// same source maps to the same Job, so a restarted operator finds the build it started.
func BuildJobName(namespace, name, sha string) string {
	return childName(maxNameLength, namespace, name, "build", short(sha))
}

// RunJobName names the Job of one FunctionJob run.
func RunJobName(name string, runID int64) string {
	return childName(maxNameLength, name, "run", strconv.FormatInt(runID, 10))
}

// ScaledJobName names the dispatcher ScaledJob of an event trigger.
func ScaledJobName(trigger string) string { return childName(maxNameLength, trigger, "events") }

// AsyncName names the ScaledJob and TriggerAuthentication draining a function's
// asynchronous invocations, in the platform namespace beside every other tenant's.
func AsyncName(namespace, name string) string {
	return childName(maxNameLength, "async", namespace, name)
}

// CronJobName names the CronJob of a cron trigger.
func CronJobName(trigger string) string { return childName(maxCronJobNameLength, trigger, "cron") }

func short(sha string) string {
	if len(sha) > 16 {
		return sha[:16]
	}
	return sha
}
