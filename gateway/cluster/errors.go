package cluster

import (
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/triggers"
)

// codeFields maps CRD paths shared by Function and FunctionJob to API field names.
var codeFields = map[string]string{
	"metadata.name":       "name",
	"spec.runtime":        "runtime",
	"spec.entrypoint":     "entrypoint",
	"spec.env":            "env_vars",
	"spec.memoryMB":       "memory_mb",
	"spec.timeoutSeconds": "timeout_sec",
	"spec.image":          "image",
	"spec.source":         "source",
}

// apiFields maps CRD paths to API field names per kind; the longest matching prefix wins.
var apiFields = map[string]map[string]string{
	"function": merge(codeFields, map[string]string{
		"spec.scale.minReplicas":            "min_replicas",
		"spec.scale.maxReplicas":            "max_replicas",
		"spec.scale.scaleDownPeriodSeconds": "scale_down_period_sec",
		"spec.scale.metric":                 "scaling_metric",
		"spec.scale.target":                 "scaling_target",
		"spec.streamIdleTimeoutSeconds":     "stream_idle_timeout_sec",
		"spec.protocol":                     "protocol",
		"spec.async.enabled":                "async.enabled",
		"spec.async.retry.maxAttempts":      "async.max_attempts",
		"spec.async.retry.backoffMillis":    "async.backoff_ms",
		"spec.async.deadLetterQueue":        "async.dead_letter_queue",
		"spec.async.maxJobs":                "async.max_jobs",
	}),
	"trigger": merge(map[string]string{
		"metadata.name":    "name",
		"spec.type":        "type",
		"spec.functionRef": "function",
		"spec.enabled":     "enabled",
	}, triggers.CRDFields()),
	"job": merge(codeFields, map[string]string{
		"spec.functionRef": "function",
		"spec.event":       "event",
		"spec.runID":       "run_id",
	}),
}

func merge(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// apiField translates a CRD field path ("spec.scale.maxReplicas") to the API's name.
func apiField(kind, path string) string {
	best, field := -1, ""
	for p, f := range apiFields[kind] {
		if (path == p || strings.HasPrefix(path, p+".") || strings.HasPrefix(path, p+"[")) && len(p) > best {
			best, field = len(p), f
		}
	}
	return field
}

// mapError turns API server errors into the gateway's typed errors; errors that already are
// (from a mutate func) pass through.
func mapError(err error, kind, ns, name string) error {
	var (
		iv *backend.InvalidError
		nf *backend.NotFoundError
		cf *backend.ConflictError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &iv), errors.As(err, &nf), errors.As(err, &cf):
		return err
	case apierrors.IsNotFound(err):
		return &backend.NotFoundError{Kind: kind, Namespace: ns, Name: name}
	case apierrors.IsAlreadyExists(err):
		return &backend.ConflictError{Kind: kind, Namespace: ns, Name: name, Reason: "already exists; update it or delete it first"}
	case apierrors.IsConflict(err):
		return &backend.ConflictError{Kind: kind, Namespace: ns, Name: name, Reason: "was changed concurrently; retry"}
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		return invalidError(err, kind)
	}
	return fmt.Errorf("%s %s/%s: %w", kind, ns, name, err)
}

// invalidError reports the first cause of a rejected write (a schema or CEL rule) with the
// API's field name.
func invalidError(err error, kind string) error {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		if d := st.Status().Details; d != nil && len(d.Causes) > 0 {
			c := d.Causes[0]
			return &backend.InvalidError{Field: apiField(kind, c.Field), Reason: c.Message}
		}
		return &backend.InvalidError{Reason: st.Status().Message}
	}
	return &backend.InvalidError{Reason: err.Error()}
}
