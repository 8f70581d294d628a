// Command docgen writes the provider's Markdown documentation (docs/, in the Terraform
// Registry layout) from the schemas themselves, with usage examples cut from configurations
// that tests apply: examples/terraform/main.tf (the offline-workflow test) and this module's
// examples/secrets/main.tf (TestAccSecretExample). Run it from terraform-provider-sless/
// after changing a schema: go run ./tools/docgen
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	dsschema "github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	resschema "github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	slessprovider "sless.dev/sless/terraform-provider-sless/internal/provider"
)

// defaultExamples are the configurations examples are cut from, relative to the module.
var defaultExamples = []string{
	filepath.Join("..", "examples", "terraform", "main.tf"),
	filepath.Join("examples", "secrets", "main.tf"),
}

func main() {
	out := flag.String("out", "docs", "directory to write the documentation to")
	var examples []string
	flag.Func("example", "configuration to cut usage examples from; repeatable (default: "+strings.Join(defaultExamples, ", ")+")", func(s string) error {
		examples = append(examples, s)
		return nil
	})
	flag.Parse()
	if len(examples) == 0 {
		examples = defaultExamples
	}
	if err := generate(*out, examples); err != nil {
		log.Fatal(err)
	}
}

// attribute is what the docs need of a schema attribute; resource, data source and provider
// attributes all have these methods.
type attribute interface {
	GetMarkdownDescription() string
	GetType() attr.Type
	IsRequired() bool
	IsOptional() bool
	IsComputed() bool
	IsSensitive() bool
}

// page is one document: a provider, resource or data source.
type page struct {
	file, title, kind, description string
	attrs                          map[string]attribute
	examples                       []string
	importName                     string
}

func generate(outDir string, examplePaths []string) error {
	blocks := map[string][]string{}
	for _, p := range examplePaths {
		b, err := exampleBlocks(p)
		if err != nil {
			return err
		}
		for key, list := range b {
			blocks[key] = append(blocks[key], list...)
		}
	}
	pages, err := pages(blocks)
	if err != nil {
		return err
	}
	for _, p := range pages {
		path := filepath.Join(outDir, p.file)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(render(p)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// pages collects every type the provider serves.
func pages(blocks map[string][]string) ([]page, error) {
	ctx := context.Background()
	p := slessprovider.New("docs")()
	var meta provider.MetadataResponse
	p.Metadata(ctx, provider.MetadataRequest{}, &meta)
	var ps provider.SchemaResponse
	p.Schema(ctx, provider.SchemaRequest{}, &ps)
	out := []page{{
		file: "index.md", title: meta.TypeName + " Provider", kind: "provider",
		description: ps.Schema.MarkdownDescription, attrs: attrsOf(ps.Schema.Attributes),
		examples: append(blocks["terraform"], blocks["provider "+meta.TypeName]...),
	}}
	// typePage is the page of resource or data source typeName in folder dir, with the
	// example blocks of that type (block is "resource" or "data").
	typePage := func(block, dir, kind, typeName, description string, attrs map[string]attribute) page {
		return page{
			file: filepath.Join(dir, strings.TrimPrefix(typeName, meta.TypeName+"_")+".md"), title: typeName, kind: kind,
			description: description, attrs: attrs, examples: blocks[block+" "+typeName],
		}
	}
	for _, newRes := range p.Resources(ctx) {
		r := newRes()
		var m resource.MetadataResponse
		r.Metadata(ctx, resource.MetadataRequest{ProviderTypeName: meta.TypeName}, &m)
		var s resource.SchemaResponse
		r.Schema(ctx, resource.SchemaRequest{}, &s)
		pg := typePage("resource", "resources", "Resource", m.TypeName, s.Schema.MarkdownDescription, attrsOf(s.Schema.Attributes))
		pg.importName = m.TypeName
		out = append(out, pg)
	}
	for _, newDS := range p.DataSources(ctx) {
		d := newDS()
		var m datasource.MetadataResponse
		d.Metadata(ctx, datasource.MetadataRequest{ProviderTypeName: meta.TypeName}, &m)
		var s datasource.SchemaResponse
		d.Schema(ctx, datasource.SchemaRequest{}, &s)
		out = append(out, typePage("data", "data-sources", "Data Source", m.TypeName, s.Schema.MarkdownDescription, attrsOf(s.Schema.Attributes)))
	}
	for _, pg := range out[1:] { // every page but the provider's documents a type
		if len(pg.examples) == 0 {
			return nil, fmt.Errorf("%s %s has no example in the example configuration", strings.ToLower(pg.kind), pg.title)
		}
	}
	return out, nil
}

func attrsOf[A attribute](m map[string]A) map[string]attribute {
	out := make(map[string]attribute, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func render(p page) string {
	var b strings.Builder
	fmt.Fprintf(&b, "<!-- Generated by tools/docgen from the provider schema; do not edit. -->\n# %s", p.title)
	if p.kind != "provider" {
		fmt.Fprintf(&b, " (%s)", p.kind)
	}
	fmt.Fprintf(&b, "\n\n%s\n\n## Example Usage\n\n", p.description)
	for _, ex := range p.examples {
		fmt.Fprintf(&b, "```terraform\n%s\n```\n\n", ex)
	}
	b.WriteString("## Schema\n")
	sections := []struct {
		title string
		keep  func(attribute) bool
	}{
		{"Required", attribute.IsRequired},
		{"Optional", attribute.IsOptional},
		{"Read-Only", func(a attribute) bool { return a.IsComputed() && !a.IsOptional() && !a.IsRequired() }},
	}
	for _, sec := range sections {
		var names []string
		for name, a := range p.attrs {
			if sec.keep(a) {
				names = append(names, name)
			}
		}
		if len(names) == 0 {
			continue
		}
		slices.Sort(names)
		fmt.Fprintf(&b, "\n### %s\n\n", sec.title)
		for _, name := range names {
			a := p.attrs[name]
			kind := typeName(a.GetType())
			if a.IsSensitive() {
				kind += ", Sensitive"
			}
			fmt.Fprintf(&b, "- `%s` (%s) %s\n", name, kind, a.GetMarkdownDescription())
			nested := nestedAttrs(a)
			for _, n := range slices.Sorted(maps.Keys(nested)) {
				fmt.Fprintf(&b, "  - `%s` (%s, %s) %s\n", n, typeName(nested[n].GetType()), presence(nested[n]), nested[n].GetMarkdownDescription())
			}
		}
	}
	if p.importName != "" {
		fmt.Fprintf(&b, "\n## Import\n\nImport by name (or `namespace/name`) in the token's namespace:\n\n```shell\nterraform import %s.example <name>\n```\n", p.importName)
	}
	return b.String()
}

// nestedAttrs are the attributes of each object of a list nested attribute, or nil.
func nestedAttrs(a attribute) map[string]attribute {
	switch a := a.(type) {
	case resschema.ListNestedAttribute:
		return attrsOf(a.NestedObject.Attributes)
	case dsschema.ListNestedAttribute:
		return attrsOf(a.NestedObject.Attributes)
	}
	return nil
}

// presence is how a nested attribute is set: Required, Optional or Read-Only.
func presence(a attribute) string {
	switch {
	case a.IsRequired():
		return "Required"
	case a.IsOptional():
		return "Optional"
	}
	return "Read-Only"
}

func typeName(t attr.Type) string {
	switch {
	case t.Equal(types.StringType):
		return "String"
	case t.Equal(types.Int64Type):
		return "Number"
	case t.Equal(types.BoolType):
		return "Boolean"
	}
	switch t := t.(type) {
	case types.MapType:
		return "Map of " + typeName(t.ElemType)
	case types.ListType:
		return "List of " + typeName(t.ElemType)
	case types.ObjectType:
		return "Object"
	}
	return t.String()
}

var blockStart = regexp.MustCompile(`^(resource|data|provider) "([^"]+)"|^(terraform) \{`)

// exampleBlocks cuts the top-level blocks of a configuration, each with the comment lines
// right above it, keyed by "resource TYPE", "data TYPE", "provider NAME" or "terraform".
func exampleBlocks(path string) (map[string][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("example configuration: %w", err)
	}
	defer f.Close()
	blocks := map[string][]string{}
	var comments, cur []string
	key := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case key != "":
			cur = append(cur, line)
			if line == "}" {
				blocks[key] = append(blocks[key], strings.Join(cur, "\n"))
				key, cur = "", nil
			}
		case strings.HasPrefix(line, "#"):
			comments = append(comments, line)
		case blockStart.MatchString(line):
			m := blockStart.FindStringSubmatch(line)
			key, cur, comments = strings.TrimSpace(m[1]+m[3]+" "+m[2]), append(comments, line), nil
			if strings.HasSuffix(line, "{}") {
				blocks[key] = append(blocks[key], strings.Join(cur, "\n"))
				key, cur = "", nil
			}
		default:
			comments = nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if key != "" {
		return nil, fmt.Errorf("%s: block %s is not closed by a \"}\" line", path, key)
	}
	return blocks, nil
}
