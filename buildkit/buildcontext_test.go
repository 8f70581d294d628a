package buildkit

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"strings"
	"testing"
)

func readTarGz(t *testing.T, data []byte) (map[string]string, []*tar.Header) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	files := map[string]string{}
	var headers []*tar.Header
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return files, headers
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[hdr.Name] = string(body)
		headers = append(headers, hdr)
	}
}

func buildContext(t testing.TB, zipData []byte, runtime, entry string) *BuildContext {
	t.Helper()
	src, err := ValidateBytes(context.Background(), zipData, runtime, entry, DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	bc, err := NewBuildContext(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	return bc
}

func TestBuildContextIsDeterministic(t *testing.T) {
	a := makeZip(t, file("handler.py", "def handle(e): return e\n"), zipEntry{name: "run.sh", body: []byte("#!/bin/sh\n"), mode: 0o755}, file("lib/x.py", "X = 1\n"))
	// Same files, other order, other timestamps, explicit directory entry.
	b := makeZip(t, file("lib/x.py", "X = 1\n"), zipEntry{name: "lib/", mode: 0o40755}, zipEntry{name: "run.sh", body: []byte("#!/bin/sh\n"), mode: 0o755}, file("handler.py", "def handle(e): return e\n"))
	ca, cb := buildContext(t, a, "python3.11", ""), buildContext(t, b, "python3.11", "")
	if ca.Hash != cb.Hash || !bytes.Equal(ca.Data, cb.Data) {
		t.Fatalf("same source gave different contexts: %s vs %s", ca.Hash, cb.Hash)
	}
	if len(ca.Hash) != 64 || ca.ImageTag() != "sha-"+ca.Hash[:16] {
		t.Errorf("hash %q / tag %q", ca.Hash, ca.ImageTag())
	}
	changed := buildContext(t, makeZip(t, file("handler.py", "def handle(e): return 1\n")), "python3.11", "")
	otherRuntime := buildContext(t, a, "python3.12", "")
	otherEntry := buildContext(t, makeZip(t, file("handler.py", "def main(e): return e\n"), zipEntry{name: "run.sh", body: []byte("#!/bin/sh\n"), mode: 0o755}, file("lib/x.py", "X = 1\n")), "python3.11", "handler.main")
	for name, c := range map[string]*BuildContext{"content": changed, "runtime": otherRuntime, "entrypoint": otherEntry} {
		if c.Hash == ca.Hash {
			t.Errorf("changing the %s kept the hash", name)
		}
	}
	_, headers := readTarGz(t, ca.Data)
	var names []string
	for _, h := range headers {
		names = append(names, h.Name)
		if !h.ModTime.Equal(contextModTime) || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Typeflag != tar.TypeReg {
			t.Errorf("%s: header not normalized: %+v", h.Name, h)
		}
		wantMode := int64(0o644)
		if h.Name == "handler/run.sh" {
			wantMode = 0o755
		}
		if h.Mode != wantMode {
			t.Errorf("%s: mode %o, want %o", h.Name, h.Mode, wantMode)
		}
	}
	if got := strings.Join(names, " "); got != "Dockerfile handler/handler.py handler/lib/x.py handler/run.sh server/server.py server/sless_identity.py" {
		t.Errorf("entries = %s", got)
	}
}

func TestBuildContextLayout(t *testing.T) {
	goWithMod := makeZip(t, file("handler.go", "package handler\nfunc Handle(event, request map[string]interface{}) interface{} { return nil }\n"),
		file("go.mod", "module example.com/fn\n\ngo 1.23.4\n"), file("go.sum", "sum\n"))
	tests := []struct {
		name, runtime, entry string
		zip                  []byte
		want                 map[string][]string // file → substrings it must contain
	}{
		{
			name: "go with user go.mod", runtime: "go1.23", zip: goWithMod,
			want: map[string][]string{
				"Dockerfile":       {"ARG BUILDER_IMAGE=golang:1.23.12-alpine\n", "ARG RUNTIME_IMAGE=alpine:3.22.1\n", "go build"},
				"go.work":          {"go 1.23.4\n", "use ./server\n", "use ./handler\n"},
				"server/go.mod":    {"module sless/fn/server\n", "go 1.23\n"},
				"server/bind.go":   {`import handler "example.com/fn"`, "handler.Handle(event, request)"},
				"server/server.go": {"package main"},
				// The verifier of signed calls (runtimes/README.md) beside each wrapper.
				"server/identity.go": {"func verifyIdentity"},
				"handler/go.mod":     {"module example.com/fn"},
				"handler/go.sum":     {"sum"},
			},
		},
		{
			name: "go without go.mod", runtime: "go1.25", entry: "Run",
			zip: makeZip(t, file("run.go", "package handler\nfunc Run(event map[string]any) any { return nil }\n")),
			want: map[string][]string{
				"Dockerfile":     {"ARG BUILDER_IMAGE=golang:1.25.3-alpine\n"},
				"go.work":        {"go 1.25\n", "use ./server\n", "use ./handler\n"},
				"handler/go.mod": {"module sless/fn/handler\n", "go 1.25\n"},
				"server/bind.go": {`import handler "sless/fn/handler"`, "handler.Run(event)"},
			},
		},
		{
			// What go mod tidy writes beside golang.org/x modules: Go orders 1.25 below 1.25.0,
			// so a go.work saying 1.25 would be refused.
			name: "go.mod at a release's .0", runtime: "go1.25",
			zip:  makeZip(t, file("h.go", "package handler\nfunc Handle(event map[string]any) any { return nil }\n"), file("go.mod", "module example.com/fn\n\ngo 1.25.0\n")),
			want: map[string][]string{"go.work": {"go 1.25.0\n"}},
		},
		{
			name: "go net/http form", runtime: "go1.25",
			zip:  makeZip(t, file("h.go", "package handler\nimport \"net/http\"\nfunc Handle(w http.ResponseWriter, r *http.Request) {}\n")),
			want: map[string][]string{"server/bind.go": {"httpHandler = handler.Handle\n"}},
		},
		{
			name: "python", runtime: "python3.12", entry: "app.main",
			zip: makeZip(t, file("app.py", ""), file("requirements.txt", "requests==2.32.3\n")),
			want: map[string][]string{
				"Dockerfile":               {"ARG BASE_IMAGE=python:3.12.11-slim-bookworm\n", "ARG HANDLER=app.main\n", "pip install"},
				"handler/requirements.txt": {"requests"},
				"server/server.py":         {"SLESS_HANDLER"},
				"server/sless_identity.py": {"def refusal"},
			},
		},
		{
			name: "node", runtime: "nodejs22",
			zip: makeZip(t, file("handler.js", ""), file("package.json", `{"dependencies":{"ms":"2.1.3"}}`)),
			want: map[string][]string{
				"Dockerfile":               {"ARG BASE_IMAGE=node:22.17.1-bookworm-slim\n", "ARG HANDLER=handler.handle\n", "npm install --omit=dev"},
				"server/server.js":         {"SLESS_HANDLER"},
				"server/sless_identity.js": {"function refusal"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			files, _ := readTarGz(t, buildContext(t, tc.zip, tc.runtime, tc.entry).Data)
			for name, subs := range tc.want {
				body, ok := files[name]
				if !ok {
					t.Errorf("context has no %s", name)
				}
				for _, s := range subs {
					if !strings.Contains(body, s) {
						t.Errorf("%s does not contain %q:\n%s", name, s, body)
					}
				}
			}
			if strings.Contains(files["go.work"]+files["server/go.mod"], "require") {
				t.Errorf("the wrapper module must not require anything:\n%s\n%s", files["go.work"], files["server/go.mod"])
			}
			for _, line := range strings.Split(files["Dockerfile"], "\n") {
				if (strings.HasPrefix(line, "ARG ") || strings.HasPrefix(line, "FROM ")) && (strings.Contains(line, ":latest") || strings.HasSuffix(line, "IMAGE=")) {
					t.Errorf("Dockerfile image not pinned: %s", line)
				}
				checkCopySources(t, line, files)
			}
		})
	}
}

func TestKanikoSpec(t *testing.T) {
	hash := strings.Repeat("ab", 32)
	spec, err := NewKanikoSpec(ContextKey("team-a", "hello", "20260101T000000.000000000Z"), hash, "registry.local:5000/", "team-a", "hello")
	if err != nil {
		t.Fatal(err)
	}
	want := KanikoSpec{
		ContextKey:  "contexts/team-a/hello/20260101T000000.000000000Z.tar.gz",
		Dockerfile:  "Dockerfile",
		Destination: "registry.local:5000/team-a/hello:sha-abababababababab",
		Tag:         "sha-abababababababab",
	}
	if spec != want {
		t.Fatalf("spec = %+v\nwant %+v", spec, want)
	}
	for _, bad := range []struct{ key, hash, ns, name string }{
		{"", hash, "a", "b"}, {"k", "short", "a", "b"}, {"k", strings.Repeat("G", 64), "a", "b"},
		// Names that would put the image outside the namespace's repositories.
		{"k", hash, "a", "../b"}, {"k", hash, "a/b", "c"}, {"k", hash, "..", "c"}, {"k", hash, "a", ""}, {"k", hash, "", "b"},
	} {
		if _, err := NewKanikoSpec(bad.key, bad.hash, "r", bad.ns, bad.name); err == nil {
			t.Errorf("%+v: want an error", bad)
		}
	}
}

// checkCopySources fails a COPY from the build context that names the context root or a
// path the context lacks: kaniko's context directory is 0750 (copied onto the workdir it
// locks out the image's user).
func checkCopySources(t *testing.T, line string, files map[string]string) {
	t.Helper()
	fields := strings.Fields(line)
	if len(fields) < 3 || fields[0] != "COPY" || strings.HasPrefix(fields[1], "--from=") {
		return
	}
	for _, src := range fields[1 : len(fields)-1] {
		if src == "." || src == "./" || src == "*" {
			t.Errorf("%q copies the whole context", line)
			continue
		}
		found := false
		for name := range files {
			found = found || name == src || strings.HasPrefix(name, src)
		}
		if !found {
			t.Errorf("%q: the context has no %s", line, src)
		}
	}
}
