package gateway

import (
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
)

// TestOpenAPIDescribesFunctionCalls: the document the gateway serves describes /fn/ calls
// with the cold-start header every answer of a function carries (under the name the
// gateway sets), and every settable async field of a function.
func TestOpenAPIDescribesFunctionCalls(t *testing.T) {
	var doc map[string]any
	if err := yaml.Unmarshal(openapiSpec, &doc); err != nil {
		t.Fatalf("openapi.yaml does not parse: %v", err)
	}
	at := func(path ...string) any {
		t.Helper()
		var v any = doc
		for _, p := range path {
			m, ok := v.(map[string]any)
			if !ok || m[p] == nil {
				t.Fatalf("openapi.yaml has no %s", strings.Join(path, " → "))
			}
			v = m[p]
		}
		return v
	}
	header := at("components", "headers", rules.HeaderColdStart).(map[string]any)
	if enum := at("components", "headers", rules.HeaderColdStart, "schema", "enum"); !reflect.DeepEqual(enum, []any{"true", "false"}) {
		t.Fatalf("%s schema enum %v, want true and false", rules.HeaderColdStart, enum)
	}
	if d, _ := header["description"].(string); !strings.Contains(d, "wait") {
		t.Fatalf("%s description %q does not say what it means", rules.HeaderColdStart, d)
	}
	if ref := at("components", "responses", "FunctionAnswer", "headers", rules.HeaderColdStart, "$ref"); ref != "#/components/headers/"+rules.HeaderColdStart {
		t.Fatalf("FunctionAnswer's %s is %v", rules.HeaderColdStart, ref)
	}
	for _, method := range []string{"get", "post"} {
		if ref := at("paths", "/fn/{namespace}/{function}", method, "responses", "default", "$ref"); ref != "#/components/responses/FunctionAnswer" {
			t.Errorf("/fn/ %s answers %v, want the FunctionAnswer with its header", method, ref)
		}
	}

	async := at("components", "schemas", "FunctionFields", "properties", "async", "properties").(map[string]any)
	fields := reflect.TypeFor[api.AsyncFields]()
	for i := range fields.NumField() {
		name, _, _ := strings.Cut(fields.Field(i).Tag.Get("json"), ",")
		if async[name] == nil {
			t.Errorf("FunctionFields.async does not document %s", name)
		}
	}
	if len(async) != fields.NumField() {
		t.Errorf("FunctionFields.async documents %d fields, api.AsyncFields has %d", len(async), fields.NumField())
	}
}
