// Package kind is what a trigger kind is to the rest of sless: the interface each kind's
// package (triggers/http, triggers/cron, triggers/rabbitmq) implements and the plain data it
// answers with. It imports the API's and the CRD's types and the data plane (dispatcher,
// history) but no control plane, so both planes, the API and the CLI read kinds through the
// registry (package triggers) without importing each other.
package kind

import (
	"reflect"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
)

// Kind is one trigger kind: its fields on the wire and in the CRD, their defaults, rules and
// the secrets they name.
type Kind interface {
	// Name is the kind's type on the wire and in the CRD ("cron").
	Name() string
	// Fields are the wire fields (of api.TriggerSpec) that belong to this kind.
	Fields() []Field
	// Takes says which fields a trigger of this kind takes, for a request that sets another
	// kind's field.
	Takes() string
	// Default sets the defaults of a new trigger of this kind.
	Default(s *api.TriggerSpec)
	// Validate checks the kind's own fields of a complete spec of this kind.
	Validate(s api.TriggerSpec) *rules.FieldError
	// SecretRefs are the secrets (of the secrets API) a spec of this kind reads.
	SecretRefs(s api.TriggerSpec) []SecretRef
	// Source says where a trigger's calls come from, for people: its URL, schedule or
	// queue, with what qualifies it (a token, a time zone, a pre-warm). The API answers it
	// as status.source, which `sless get triggers` and the console show.
	Source(t api.Trigger) string

	// FromCRD copies the kind's part of a Trigger's spec onto out.
	FromCRD(s v1alpha1.TriggerSpec, out *api.TriggerSpec)
	// ToCRD writes the kind's part of s onto dst when s is of this kind, and clears it
	// otherwise.
	ToCRD(s api.TriggerSpec, dst *v1alpha1.TriggerSpec)
	// CRDFields name the API field of each of the kind's CRD field paths, so the API server's
	// refusals name what the caller sent.
	CRDFields() map[string]string

	// Routes says the kind's triggers gate their function's /fn/ route (rules.HTTPGate) and
	// show its URL, on both planes.
	Routes() bool
	// Cluster is what the operator renders for a Trigger of this kind.
	Cluster(s v1alpha1.TriggerSpec) Cluster
}

// Cluster is what the operator runs for a trigger, as data the renderers (package scaling)
// turn into objects: nothing (http), a CronJob per Schedule, or a KEDA ScaledJob started by
// Scaler. Either way its pods run `sless` with Args, the common flags (function, targets,
// timeout), then Flags, and the variables Env from the trigger's secrets.
type Cluster struct {
	Args, Flags []string
	Env         []SecretEnv
	Schedule    *Schedule
	Scaler      *Scaler
}

// SecretEnv is a variable of the dispatcher's pods from a key of a secret.
type SecretEnv struct{ Name, Secret, Key string }

// Schedule fires a CronJob; PrewarmSeconds > 0 has the operator wake the function that long
// before each tick.
type Schedule struct {
	Cron, TimeZone, ConcurrencyPolicy string
	StartingDeadlineSeconds           int64
	PrewarmSeconds                    int32
}

// Scaler is one of KEDA's scalers (Type as KEDA names it, with its metadata) starting
// dispatcher Jobs, at most MaxJobs at once; Auth are the parameters its
// TriggerAuthentication reads from secrets, so no credential appears in the ScaledJob.
type Scaler struct {
	Type     string
	Metadata map[string]string
	Auth     []AuthSecret
	MaxJobs  int32
}

// AuthSecret is a parameter of a scaler read from a key of a secret.
type AuthSecret struct{ Parameter, Secret, Key string }

// Field describes one wire field of a kind, as data: the API applies, checks and names it
// from this, and the clients list it.
type Field struct {
	Name string // on the wire: "schedule"
	// Required: a trigger of the kind must set it.
	Required bool
	// Exclusive: a trigger of another kind must not set it (fields with server defaults are
	// not checked).
	Exclusive bool
	// Queue: a broker queue name the tenant chooses (a string field), which must be one
	// of its own (rules.QueuePrefix).
	Queue bool
	// Secret: it names a secret of the secrets API (a SecretRef's Field).
	Secret bool
	// Get reads the field of a spec; Set applies it from a request when it was sent.
	Get func(api.TriggerSpec) any
	Set func(*api.TriggerSpec, api.TriggerFields)
}

// IsSet reports whether s sets the field (a value other than its zero value).
func (f Field) IsSet(s api.TriggerSpec) bool { return !reflect.ValueOf(f.Get(s)).IsZero() }

// SecretRef is one secret a trigger reads: its name and key, and the wire fields naming them.
type SecretRef struct {
	Secret, Key     string
	Field, KeyField string
}

// SetIf sets *dst to *v when v was sent.
func SetIf[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}
