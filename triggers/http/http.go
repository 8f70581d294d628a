// Package http is the http trigger kind: it opens its function's /fn/ route (require_auth:
// only to callers with a token); every http trigger of a function disabled closes it.
package http

import (
	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
	"sless.dev/sless/triggers/kind"
)

// Kind is the http trigger kind.
type Kind struct{}

var _ kind.Kind = Kind{}

func (Kind) Name() string { return api.TriggerHTTP }

func (Kind) Takes() string {
	return "only cron and event triggers take this field; an http trigger has function, enabled and require_auth"
}

func (Kind) Fields() []kind.Field {
	return []kind.Field{
		{Name: "require_auth", Exclusive: true,
			Get: func(s api.TriggerSpec) any { return s.RequireAuth },
			Set: func(s *api.TriggerSpec, f api.TriggerFields) { kind.SetIf(&s.RequireAuth, f.RequireAuth) }},
	}
}

func (Kind) Default(*api.TriggerSpec) {}

func (Kind) Validate(api.TriggerSpec) *rules.FieldError { return nil }

func (Kind) SecretRefs(api.TriggerSpec) []kind.SecretRef { return nil }

// Source is the function's URL (once the plane has set it) and who may call it: "token
// required" or "public".
func (Kind) Source(t api.Trigger) string {
	who := "public"
	if t.RequireAuth {
		who = "token required"
	}
	if t.Status.URL == "" {
		return who
	}
	return t.Status.URL + " · " + who
}

func (Kind) FromCRD(s v1alpha1.TriggerSpec, out *api.TriggerSpec) { out.RequireAuth = s.RequireAuth }

func (k Kind) ToCRD(s api.TriggerSpec, dst *v1alpha1.TriggerSpec) {
	dst.RequireAuth = s.Type == k.Name() && s.RequireAuth
}

func (Kind) CRDFields() map[string]string {
	return map[string]string{"spec.requireAuth": "require_auth"}
}

// Routes: an http trigger is its function's /fn/ route.
func (Kind) Routes() bool { return true }

// Cluster renders nothing: the Function's own HTTPScaledObject serves the route.
func (Kind) Cluster(v1alpha1.TriggerSpec) kind.Cluster { return kind.Cluster{} }
