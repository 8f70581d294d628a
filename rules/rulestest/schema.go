package rulestest

import "strings"

// SchemaLimits calls fn with the dotted path and the value of every limit keyword (minimum,
// maximum, min/maxLength, min/maxItems, min/maxProperties) and every default a JSON schema
// states: a CRD's (paths below its openAPIV3Schema) or one of the API document's (paths
// below the schema given). Both can only hold literals; their tests hold them equal to the
// rules. Numbers come as int64.
func SchemaLimits(schema any, fn func(path, keyword string, v any)) {
	schemaLimits(schema, "", fn)
}

func schemaLimits(v any, path string, fn func(path, keyword string, v any)) {
	switch n := v.(type) {
	case []any:
		for _, c := range n {
			schemaLimits(c, path, fn)
		}
	case map[string]any:
		if path != "" {
			for _, kw := range []string{"minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties", "default"} {
				if x, ok := n[kw]; ok {
					if _, object := x.(map[string]any); !object {
						if f, isFloat := x.(float64); isFloat {
							x = int64(f)
						}
						fn(path, kw, x)
					}
				}
			}
		}
		for k, c := range n {
			switch {
			case k == "properties":
				for name, p := range c.(map[string]any) {
					schemaLimits(p, strings.TrimPrefix(path+"."+name, "."), fn)
				}
			case k == "openAPIV3Schema":
				schemaLimits(c, "", fn)
			default:
				schemaLimits(c, path, fn)
			}
		}
	}
}
