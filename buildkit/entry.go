package buildkit

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"go/version"
	"path"
	"regexp"
	"strings"

	"golang.org/x/mod/modfile"
)

var (
	identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	nodeFile   = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_./-]*$`)
)

// splitEntrypoint splits "a.b.func" into ("a.b", "func").
func splitEntrypoint(ep string) (module, fn string, ok bool) {
	i := strings.LastIndexByte(ep, '.')
	if i <= 0 || !identifier.MatchString(ep[i+1:]) {
		return "", "", false
	}
	return ep[:i], ep[i+1:], true
}

// The entrypoint forms, as the error messages describe them.
const (
	goForm     = "an exported function name such as Handle, or handler.Handle"
	pythonForm = "module.function, such as handler.handle or pkg.mod.handle"
	nodeForm   = "file.export, such as handler.handle or src/index.handle"
)

var entrypointForms = map[Language]string{LanguageGo: goForm, LanguagePython: pythonForm, LanguageNode: nodeForm}

// MaxEntrypointLength and EntrypointPattern bound the entrypoint of any runtime, as the
// Function and FunctionJob CRDs do (CodeSpec.Entrypoint).
const MaxEntrypointLength = 253

// EntrypointPattern: see MaxEntrypointLength.
var EntrypointPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_./-]*$`)

func badEntrypoint(rt Runtime, ep, form string) error {
	return &ValidationError{Rule: RuleInvalidEntrypoint,
		Reason: fmt.Sprintf("entrypoint %q is not valid for %s", ep, rt.Name),
		Fix:    fmt.Sprintf("use %s (the default is %s)", form, rt.DefaultEntrypoint)}
}

// NormalizeEntrypoint checks the form of ep for runtime, which create and update can do
// before any code is uploaded, and returns it as the build uses it: "" is the runtime's
// default, and Go's handler.Handle (the module.function form of the other runtimes) is
// Handle, since a Go function always lives in package handler.
func NormalizeEntrypoint(runtime, ep string) (string, error) {
	rt, err := LookupRuntime(runtime)
	if err != nil {
		return "", err
	}
	if ep == "" {
		return rt.DefaultEntrypoint, nil
	}
	// What the Function and FunctionJob CRDs accept of any runtime, with this runtime's form
	// in the message.
	if len(ep) > MaxEntrypointLength || !EntrypointPattern.MatchString(ep) {
		return "", badEntrypoint(rt, ep, entrypointForms[rt.Language])
	}
	switch rt.Language {
	case LanguageGo:
		fn := strings.TrimPrefix(ep, "handler.")
		if !identifier.MatchString(fn) || !token.IsExported(fn) {
			return "", badEntrypoint(rt, ep, goForm)
		}
		return fn, nil
	case LanguagePython:
		module, _, ok := splitEntrypoint(ep)
		for _, part := range strings.Split(module, ".") {
			ok = ok && identifier.MatchString(part)
		}
		if !ok {
			return "", badEntrypoint(rt, ep, pythonForm)
		}
	case LanguageNode:
		file, _, ok := splitEntrypoint(ep)
		// The entrypoint ends up in the Dockerfile: only plain path characters are allowed.
		if !ok || !nodeFile.MatchString(file) || strings.Contains("/"+file+"/", "/../") {
			return "", badEntrypoint(rt, ep, nodeForm)
		}
	}
	return ep, nil
}

// noEntrypoint names the file the runtime expects and, when the whole upload sits in one
// folder, says so: zipping the folder instead of its contents is the usual mistake.
func noEntrypoint(src *Source, file, what string) error {
	fix := "add " + file + " at the top level of the zip " + what
	if dir, ok := singleTopDir(src.Archive); ok {
		fix = fmt.Sprintf("every file is inside %s/: zip the contents of the folder, not the folder itself", dir)
	}
	return &ValidationError{Rule: RuleNoEntrypoint, File: file,
		Reason: fmt.Sprintf("the %s entry point %q needs %s, which is not in the zip", src.Runtime.Name, src.Entrypoint, file),
		Fix:    fix}
}

func singleTopDir(a *Archive) (string, bool) {
	top := ""
	for _, f := range a.Files {
		dir, _, found := strings.Cut(f.Name, "/")
		if !found || (top != "" && dir != top) {
			return "", false
		}
		top = dir
	}
	return top, top != ""
}

func checkPythonSource(src *Source) error {
	module, _, _ := splitEntrypoint(src.Entrypoint)
	file := strings.ReplaceAll(module, ".", "/")
	if _, ok := src.Lookup(file + ".py"); ok {
		return nil
	}
	if _, ok := src.Lookup(file + "/__init__.py"); ok {
		return nil
	}
	return noEntrypoint(src, file+".py", "defining def "+src.Entrypoint[len(module)+1:]+"(event)")
}

func checkNodeSource(src *Source) error {
	file, fn, _ := splitEntrypoint(src.Entrypoint)
	if data, err := src.ReadFile("package.json"); err == nil {
		if !json.Valid(data) {
			return &ValidationError{Rule: RuleBadManifest, File: "package.json", Reason: "package.json is not valid JSON",
				Fix: "fix the syntax (npm install would reject it too)"}
		}
	} else if _, isValidation := AsValidationError(err); isValidation {
		return err
	}
	for _, candidate := range []string{file + ".js", file + "/index.js"} {
		if _, ok := src.Lookup(candidate); ok {
			return nil
		}
	}
	return noEntrypoint(src, file+".js", "exporting "+fn+" (module.exports."+fn+" = async (event) => ...)")
}

// checkGoSource finds the entry function among the top-level .go files and reads the user's
// go.mod, if any, for the go directive.
func checkGoSource(src *Source) error {
	src.goVersion = src.Runtime.Version
	if err := checkGoMod(src); err != nil {
		return err
	}
	want := fmt.Sprintf("func %s(event map[string]interface{}) interface{}", src.Entrypoint)
	found := false
	for _, f := range src.Files {
		if path.Dir(f.Name) != "." || path.Ext(f.Name) != ".go" || strings.HasSuffix(f.Name, "_test.go") {
			continue
		}
		data, err := src.ReadFile(f.Name)
		if err != nil {
			return err
		}
		params, err := goEntry(f.Name, data, src.Entrypoint, want)
		if err != nil {
			return err
		}
		if params != 0 {
			src.goParams, found = params, true
		}
	}
	if !found {
		return noEntrypoint(src, "handler.go", "with package handler and "+want)
	}
	return nil
}

// goEntry parses one top-level file: it must be package handler; it returns the entry
// function's parameter count, or 0 when the file does not declare it.
func goEntry(name string, data []byte, entry, want string) (int, error) {
	file, err := parser.ParseFile(token.NewFileSet(), name, data, parser.SkipObjectResolution)
	if err != nil {
		return 0, &ValidationError{Rule: RuleInvalidEntrypoint, File: name, Reason: "the file does not parse: " + err.Error(),
			Fix: "fix the syntax error (go vet ./... shows it locally)"}
	}
	if file.Name.Name != "handler" {
		return 0, &ValidationError{Rule: RuleInvalidEntrypoint, File: name,
			Reason: fmt.Sprintf("top-level Go files must be package handler, not %s", file.Name.Name),
			Fix:    "write package handler at the top of the file"}
	}
	for _, decl := range file.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Recv != nil || fn.Name.Name != entry {
			continue
		}
		if params, ok := entrySignature(fn.Type); ok {
			return params, nil
		}
		return 0, &ValidationError{Rule: RuleInvalidEntrypoint, File: name,
			Reason: fmt.Sprintf("func %s has an unsupported signature", entry),
			Fix: "declare " + want + ", add a second map[string]interface{} parameter for the request metadata, " +
				"or write it in the net/http form func " + entry + "(w http.ResponseWriter, r *http.Request)"}
	}
	return 0, nil
}

// goHTTPForm is the parameter count entrySignature reports for the net/http form
// func(http.ResponseWriter, *http.Request), which answers the request itself.
const goHTTPForm = -1

func entrySignature(ft *ast.FuncType) (int, bool) {
	if ft.TypeParams == nil && ft.Results == nil && ft.Params.NumFields() == 2 {
		var types2 []string
		for _, field := range ft.Params.List {
			for range max(len(field.Names), 1) {
				types2 = append(types2, types.ExprString(field.Type))
			}
		}
		if types2[0] == "http.ResponseWriter" && types2[1] == "*http.Request" {
			return goHTTPForm, true
		}
	}
	isMap := func(e ast.Expr) bool {
		s := types.ExprString(e)
		return s == "map[string]interface{}" || s == "map[string]any"
	}
	if ft.TypeParams != nil || ft.Results == nil || ft.Results.NumFields() != 1 {
		return 0, false
	}
	if r := types.ExprString(ft.Results.List[0].Type); r != "interface{}" && r != "any" {
		return 0, false
	}
	var n int
	for _, field := range ft.Params.List {
		if !isMap(field.Type) {
			return 0, false
		}
		n += max(len(field.Names), 1)
	}
	return n, n == 1 || n == 2
}

// checkGoMod parses the user's go.mod: its go directive may not exceed the runtime's Go
// version (the image's toolchain cannot build it) and raises the workspace's go directive.
func checkGoMod(src *Source) error {
	data, err := src.ReadFile("go.mod")
	if err != nil {
		if _, isValidation := AsValidationError(err); isValidation {
			return err
		}
		return nil
	}
	mf, err := modfile.ParseLax("go.mod", data, nil)
	if err != nil {
		return &ValidationError{Rule: RuleBadManifest, File: "go.mod", Reason: "go.mod does not parse: " + err.Error(),
			Fix: "fix go.mod (go mod tidy shows the problem locally)"}
	}
	if mf.Module == nil || mf.Module.Mod.Path == "" {
		return &ValidationError{Rule: RuleBadManifest, File: "go.mod", Reason: "go.mod has no module line",
			Fix: "start go.mod with a module line, e.g. module myfunction"}
	}
	src.goModule = mf.Module.Mod.Path
	if mf.Module.Mod.Path == wrapperModule {
		return &ValidationError{Rule: RuleBadManifest, File: "go.mod", Reason: "the module path " + wrapperModule + " is reserved for the wrapper",
			Fix: "name your module anything else, e.g. myfunction"}
	}
	if mf.Go != nil {
		if version.Compare(version.Lang("go"+mf.Go.Version), "go"+src.Runtime.Version) > 0 {
			return &ValidationError{Rule: RuleBadManifest, File: "go.mod",
				Reason: fmt.Sprintf("go.mod requires go %s but runtime %s has Go %s", mf.Go.Version, src.Runtime.Name, src.Runtime.Version),
				Fix:    "choose a newer runtime or lower the go directive"}
		}
		// Compared in Go's own order ("1.25" < "1.25.0"): go.work's line below a module's
		// makes the go command refuse the workspace.
		if version.Compare("go"+mf.Go.Version, "go"+src.goVersion) > 0 {
			src.goVersion = mf.Go.Version
		}
	}
	return nil
}
