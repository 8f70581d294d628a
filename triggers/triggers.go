// Package triggers is the registry of trigger kinds: the API's validation, the CRD
// conversion, both control planes, the dispatcher and the clients look a kind up here
// instead of switching on its name. Each kind's package owns what the kind means; adding a
// kind is its package plus one line in kinds.
package triggers

import (
	"strings"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/triggers/cron"
	httptrigger "sless.dev/sless/triggers/http"
	"sless.dev/sless/triggers/kind"
	"sless.dev/sless/triggers/rabbitmq"
)

// kinds is every trigger kind, in the order the API names them.
var kinds = []kind.Kind{
	httptrigger.Kind{},
	cron.Kind{},
	rabbitmq.Kind{},
}

// All is every kind, in the API's order.
func All() []kind.Kind { return kinds }

// Lookup finds the kind named name ("cron").
func Lookup(name string) (kind.Kind, bool) {
	for _, k := range kinds {
		if k.Name() == name {
			return k, true
		}
	}
	return nil, false
}

// Names lists the kinds for people: "http, cron or event".
func Names() string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.Name()
	}
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Source is where t's calls come from, as its kind says (Kind.Source): the API's
// status.source.
func Source(t api.Trigger) string {
	if k, ok := Lookup(t.Type); ok {
		return k.Source(t)
	}
	return ""
}

// Apply sets the sent fields of f on spec, every kind's (a field of another kind is then
// refused by Misplaced, naming it).
func Apply(spec *api.TriggerSpec, f api.TriggerFields) {
	for _, k := range kinds {
		for _, fl := range k.Fields() {
			fl.Set(spec, f)
		}
	}
}

// Misplaced names the first field s sets that only another kind takes ("" when none).
func Misplaced(s api.TriggerSpec) string {
	for _, k := range kinds {
		if k.Name() == s.Type {
			continue
		}
		for _, f := range k.Fields() {
			if f.Exclusive && f.IsSet(s) {
				return f.Name
			}
		}
	}
	return ""
}

// Queues are the queue names s sets, as (field, name) pairs.
func Queues(s api.TriggerSpec) [][2]string {
	k, ok := Lookup(s.Type)
	if !ok {
		return nil
	}
	var out [][2]string
	for _, f := range k.Fields() {
		if f.Queue {
			out = append(out, [2]string{f.Name, f.Get(s).(string)})
		}
	}
	return out
}

// SecretRefs are the secrets s reads.
func SecretRefs(s api.TriggerSpec) []kind.SecretRef {
	if k, ok := Lookup(s.Type); ok {
		return k.SecretRefs(s)
	}
	return nil
}

// Uses reports whether s reads the secret named secret.
func Uses(s api.TriggerSpec, secret string) bool {
	for _, r := range SecretRefs(s) {
		if r.Secret == secret {
			return true
		}
	}
	return false
}

// SecretFields are the wire fields of every kind that name a secret, for people.
func SecretFields() []string {
	var out []string
	for _, k := range kinds {
		for _, f := range k.Fields() {
			if f.Secret {
				out = append(out, f.Name)
			}
		}
	}
	return out
}

// FromCRD is a Trigger's spec as the API shows it.
func FromCRD(s v1alpha1.TriggerSpec) api.TriggerSpec {
	out := api.TriggerSpec{Type: string(s.Type), Function: s.FunctionRef.Name, Enabled: s.IsEnabled()}
	for _, k := range kinds {
		k.FromCRD(s, &out)
	}
	return out
}

// ToCRD writes the API's spec s onto a Trigger's spec, leaving the CRD's own fields (those
// the API does not show) as they are.
func ToCRD(dst *v1alpha1.TriggerSpec, s api.TriggerSpec) {
	enabled := s.Enabled
	dst.Type, dst.FunctionRef.Name, dst.Enabled = v1alpha1.TriggerType(s.Type), s.Function, &enabled
	for _, k := range kinds {
		k.ToCRD(s, dst)
	}
}

// CRDFields maps every kind's CRD field paths to the API's names.
func CRDFields() map[string]string {
	out := map[string]string{}
	for _, k := range kinds {
		for path, field := range k.CRDFields() {
			out[path] = field
		}
	}
	return out
}
