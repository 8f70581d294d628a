package scaling

import (
	"reflect"
	"testing"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway/api"
)

// notRevisioned are the fields of a function's spec that are the function's own and apply
// to every revision (scaling, streaming, async, traffic, history, rollout): a change to
// one makes no revision. Every other field is in the revision snapshot.
var notRevisioned = map[reflect.Type][]string{
	reflect.TypeFor[v1.FunctionSpec](): {"Scale", "StreamIdleTimeoutSeconds", "Async", "Traffic", "RevisionHistoryLimit", "Rollout"},
	reflect.TypeFor[api.FunctionSpec](): {"MinReplicas", "MaxReplicas", "ScaleDownPeriodSec", "ScalingMetric", "ScalingTarget",
		"StreamIdleTimeoutSec", "Async", "Traffic", "RevisionHistoryLimit", "Rollout"},
}

// TestRevisionSnapshot walks every field of both planes' function spec (the CRD's, its
// inlined CodeSpec's fields included, and the API's): a field not declared in
// notRevisioned must change the revision snapshot (api.RevisionConfig) when set, and a
// declared one must not; every field of the snapshot is filled by both conversions.
func TestRevisionSnapshot(t *testing.T) {
	checkSnapshot(t, func(s *v1.FunctionSpec) api.RevisionConfig { return RevisionConfigOf(&s.CodeSpec) })
	checkSnapshot(t, func(s *api.FunctionSpec) api.RevisionConfig { return api.RevisionConfigOf(*s) })
}

func checkSnapshot[S any](t *testing.T, snapshot func(*S) api.RevisionConfig) {
	typ := reflect.TypeFor[S]()
	skip := map[string]bool{}
	for _, name := range notRevisioned[typ] {
		if _, ok := typ.FieldByName(name); !ok {
			t.Errorf("%s has no field %s (notRevisioned)", typ, name)
		}
		skip[name] = true
	}
	var base S
	for _, f := range reflect.VisibleFields(typ) {
		if f.Anonymous {
			continue // its fields are walked themselves
		}
		var spec S
		fill(reflect.ValueOf(&spec).Elem().FieldByIndex(f.Index))
		changed := !api.SameRevisionConfig(snapshot(&base), snapshot(&spec))
		switch {
		case skip[f.Name] && changed:
			t.Errorf("%s.%s is declared not revisioned but changes the revision snapshot", typ, f.Name)
		case !skip[f.Name] && !changed:
			t.Errorf("%s.%s is neither in the revision snapshot (api.RevisionConfig) nor declared not revisioned (notRevisioned)", typ, f.Name)
		}
	}
	var full S
	fill(reflect.ValueOf(&full).Elem())
	got := reflect.ValueOf(snapshot(&full))
	for i := range got.NumField() {
		if got.Field(i).IsZero() {
			t.Errorf("the revision snapshot of a full %s leaves %s unset", typ, got.Type().Field(i).Name)
		}
	}
}

// fill sets every field below v to a value that is not its zero.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(0.5)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.Map:
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		v.Set(reflect.MakeMap(v.Type()))
		v.SetMapIndex(k, e)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	}
}
