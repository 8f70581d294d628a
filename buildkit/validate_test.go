package buildkit

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"io/fs"
	"net/http"
	"strings"
	"testing"
)

func TestValidateRejects(t *testing.T) {
	zeros := bytes.Repeat([]byte{0}, 2<<20)
	small := DefaultLimits()
	small.MaxZipBytes, small.MaxUncompressedBytes, small.MaxEntries = 4096, 8192, 3
	handler := file("handler.py", "def handle(event):\n    return event\n")
	lying := &zip.FileHeader{Name: "handler.py", Method: zip.Store, CRC32: crc32.ChecksumIEEE([]byte("x")),
		CompressedSize64: 1, UncompressedSize64: 1}
	tests := []struct {
		name    string
		zip     []byte
		runtime string
		entry   string
		limits  *Limits
		rule    Rule
		file    string
		status  int
		message string // part of the error text the user sees
	}{
		{name: "not a zip", zip: []byte("hello"), rule: RuleNotZip},
		{name: "zip slip", zip: makeZip(t, handler, file("../../etc/passwd", "x")), rule: RuleParentPath, file: "../../etc/passwd"},
		{name: "zip slip inside", zip: makeZip(t, handler, file("a/../../b", "x")), rule: RuleParentPath},
		{name: "absolute path", zip: makeZip(t, handler, file("/etc/passwd", "x")), rule: RuleAbsolutePath, file: "/etc/passwd"},
		{name: "windows drive", zip: makeZip(t, handler, file("C:/x.txt", "x")), rule: RuleAbsolutePath},
		{name: "backslash", zip: makeZip(t, handler, file(`..\evil`, "x")), rule: RuleInvalidName},
		{name: "invalid utf-8", zip: makeZip(t, handler, file("bad\xff.txt", "x")), rule: RuleInvalidName},
		{name: "nul byte", zip: makeZip(t, handler, file("a\x00b", "x")), rule: RuleInvalidName},
		{name: "symlink", zip: makeZip(t, handler, zipEntry{name: "link", body: []byte("/etc/passwd"), mode: fs.ModeSymlink | 0o777}), rule: RuleSymlink, file: "link"},
		{name: "device file", zip: makeZip(t, handler, zipEntry{name: "dev", mode: fs.ModeDevice | fs.ModeCharDevice | 0o600}), rule: RuleSpecialFile},
		{name: "named pipe", zip: makeZip(t, handler, zipEntry{name: "fifo", mode: fs.ModeNamedPipe | 0o600}), rule: RuleSpecialFile},
		{name: "duplicate", zip: makeZip(t, handler, file("a.txt", "1"), file("a.txt", "2")), rule: RuleDuplicateName, file: "a.txt"},
		{name: "duplicate after cleaning", zip: makeZip(t, handler, file("a/b.txt", "1"), file("a//b.txt", "2")), rule: RuleDuplicateName},
		{name: "file and directory", zip: makeZip(t, handler, file("a", "1"), file("a/b", "2")), rule: RuleDuplicateName, file: "a"},
		{name: "zip bomb", zip: makeZip(t, handler, zipEntry{name: "bomb.bin", body: zeros}), rule: RuleCompressionRatio, file: "bomb.bin", status: http.StatusRequestEntityTooLarge},
		{name: "zip too large", zip: makeZip(t, handler, zipEntry{name: "r.bin", body: randomBytes(8192), method: zip.Store}), limits: &small, rule: RuleZipTooLarge, status: http.StatusRequestEntityTooLarge},
		{name: "uncompressed too large", zip: makeZip(t, handler, zipEntry{name: "z.bin", body: zeros[:9000]}), limits: &small, rule: RuleUncompressedTooLarge, status: http.StatusRequestEntityTooLarge},
		{name: "too many entries", zip: makeZip(t, handler, file("a", ""), file("b", ""), file("c", "")), limits: &small, rule: RuleTooManyEntries, status: http.StatusRequestEntityTooLarge},
		{name: "encrypted", zip: makeZip(t, zipEntry{raw: &zip.FileHeader{Name: "handler.py", Method: zip.Store, Flags: 0x1}}), rule: RuleUnsupportedEntry},
		{name: "unknown method", zip: makeZip(t, zipEntry{raw: &zip.FileHeader{Name: "handler.py", Method: 99}}), rule: RuleUnsupportedEntry},
		{name: "corrupt entry", zip: makeZip(t, zipEntry{raw: lying, body: []byte("y")}), rule: RuleCorrupt, file: "handler.py"},
		{name: "unknown runtime", zip: makeZip(t, handler), runtime: "cobol85", rule: RuleUnknownRuntime, message: "go1.23"},
		{name: "python without handler.py", zip: makeZip(t, file("main.py", "")), rule: RuleNoEntrypoint, file: "handler.py"},
		{name: "folder zipped instead of contents", zip: makeZip(t, file("myfn/handler.py", "")), rule: RuleNoEntrypoint, message: "zip the contents of the folder"},
		{name: "python custom entrypoint missing", zip: makeZip(t, handler), entry: "app.main.run", rule: RuleNoEntrypoint, file: "app/main.py"},
		{name: "python bad entrypoint", zip: makeZip(t, handler), entry: "handler", rule: RuleInvalidEntrypoint},
		{name: "node without handler.js", runtime: "nodejs20", zip: makeZip(t, file("index.ts", "")), rule: RuleNoEntrypoint, file: "handler.js"},
		{name: "node entrypoint injection", runtime: "nodejs20", zip: makeZip(t, file("handler.js", "")), entry: "handler\nRUN x.handle", rule: RuleInvalidEntrypoint},
		{name: "node bad package.json", runtime: "nodejs20", zip: makeZip(t, file("handler.js", ""), file("package.json", "{")), rule: RuleBadManifest, file: "package.json"},
		{name: "go without handler", runtime: "go1.23", zip: makeZip(t, file("main.go", "package handler\n")), rule: RuleNoEntrypoint, file: "handler.go"},
		{name: "go wrong package", runtime: "go1.23", zip: makeZip(t, file("main.go", "package main\nfunc main() {}\n")), rule: RuleInvalidEntrypoint, file: "main.go"},
		{name: "go syntax error", runtime: "go1.23", zip: makeZip(t, file("handler.go", "package handler\nfunc {")), rule: RuleInvalidEntrypoint, file: "handler.go"},
		{name: "go wrong signature", runtime: "go1.23", zip: makeZip(t, file("handler.go", "package handler\nfunc Handle(s string) string { return s }\n")), rule: RuleInvalidEntrypoint, message: "unsupported signature"},
		{name: "go unexported entrypoint", runtime: "go1.23", entry: "handle", zip: makeZip(t, file("handler.go", "package handler\n")), rule: RuleInvalidEntrypoint},
		{name: "go.mod too new", runtime: "go1.23", zip: makeZip(t, goHandler, file("go.mod", "module x\n\ngo 1.25\n")), rule: RuleBadManifest, file: "go.mod", message: "go 1.25"},
		{name: "go.mod broken", runtime: "go1.23", zip: makeZip(t, goHandler, file("go.mod", "module x\nrequire (\n")), rule: RuleBadManifest, file: "go.mod"},
		{name: "go.mod reserved module", runtime: "go1.23", zip: makeZip(t, goHandler, file("go.mod", "module sless/fn/server\n")), rule: RuleBadManifest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lim := DefaultLimits()
			if tc.limits != nil {
				lim = *tc.limits
			}
			runtime := tc.runtime
			if runtime == "" {
				runtime = "python3.11"
			}
			src, err := ValidateBytes(context.Background(), tc.zip, runtime, tc.entry, lim)
			if err == nil && tc.rule == RuleCorrupt { // data damage shows when the data is read
				_, err = NewBuildContext(context.Background(), src)
			}
			ve, ok := AsValidationError(err)
			if !ok {
				t.Fatalf("want a *ValidationError with rule %s, got %v", tc.rule, err)
			}
			if ve.Rule != tc.rule {
				t.Fatalf("rule = %s, want %s (%v)", ve.Rule, tc.rule, err)
			}
			if tc.file != "" && ve.File != tc.file {
				t.Errorf("file = %q, want %q", ve.File, tc.file)
			}
			want := tc.status
			if want == 0 {
				want = http.StatusBadRequest
			}
			if ve.StatusCode() != want {
				t.Errorf("status = %d, want %d", ve.StatusCode(), want)
			}
			if ve.Fix == "" {
				t.Errorf("no fix in %v", err)
			}
			if !strings.Contains(err.Error(), tc.message) {
				t.Errorf("error %q does not mention %q", err, tc.message)
			}
		})
	}
}

var goHandler = file("handler.go", "package handler\n\nfunc Handle(event map[string]interface{}) interface{} { return event }\n")

func TestValidateAccepts(t *testing.T) {
	tests := []struct {
		name, runtime, entry string
		zip                  []byte
		wantFiles            []string
		wantParams           int
	}{
		{name: "python default", runtime: "python3.11", zip: makeZip(t, file("handler.py", ""), file("lib/util.py", "")), wantFiles: []string{"handler.py", "lib/util.py"}},
		{name: "python package entrypoint", runtime: "python3.12", entry: "app.handle", zip: makeZip(t, file("app/__init__.py", ""))},
		{name: "directories and ./ prefix", runtime: "python3.11", zip: makeZip(t, zipEntry{name: "lib/", mode: fs.ModeDir | 0o755}, file("./handler.py", ""), file("lib/x.py", "")), wantFiles: []string{"handler.py", "lib/x.py"}},
		{name: "small files compress well", runtime: "python3.11", zip: makeZip(t, file("handler.py", strings.Repeat("a", 100_000)))},
		{name: "node nested entrypoint", runtime: "nodejs22", entry: "src/index.handle", zip: makeZip(t, file("src/index.js", ""), file("package.json", `{"dependencies":{}}`))},
		{name: "node directory module", runtime: "nodejs20", zip: makeZip(t, file("handler/index.js", ""))},
		{name: "go one parameter", runtime: "go1.23", zip: makeZip(t, goHandler), wantParams: 1},
		{name: "go request parameter", runtime: "go1.25", zip: makeZip(t, file("h.go", "package handler\nfunc Handle(event, request map[string]any) any { return nil }\n"), file("go.mod", "module x\n\ngo 1.25.1\n")), wantParams: 2},
		{name: "go net/http form", runtime: "go1.25", zip: makeZip(t, file("h.go", "package handler\nimport \"net/http\"\nfunc Handle(w http.ResponseWriter, r *http.Request) {}\n")), wantParams: goHTTPForm},
		{name: "go custom entrypoint and tests ignored", runtime: "go1.23", entry: "Run", zip: makeZip(t, file("run.go", "package handler\nfunc Run(e map[string]interface{}) interface{} { return e }\n"), file("run_test.go", "package handler_test\n")), wantParams: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src, err := ValidateBytes(context.Background(), tc.zip, tc.runtime, tc.entry, DefaultLimits())
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantFiles != nil {
				var got []string
				for _, f := range src.Files {
					got = append(got, f.Name)
				}
				if strings.Join(got, ",") != strings.Join(tc.wantFiles, ",") {
					t.Errorf("files = %v, want %v", got, tc.wantFiles)
				}
			}
			if src.goParams != tc.wantParams {
				t.Errorf("go entry parameters = %d, want %d", src.goParams, tc.wantParams)
			}
		})
	}
}

func TestReadUploadCapsSize(t *testing.T) {
	lim := DefaultLimits()
	lim.MaxZipBytes = 10
	if _, err := ReadUpload(bytes.NewReader(make([]byte, 10)), lim); err != nil {
		t.Fatalf("10 bytes at a 10-byte cap: %v", err)
	}
	_, err := ReadUpload(bytes.NewReader(make([]byte, 11)), lim)
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Rule != RuleZipTooLarge || ve.StatusCode() != http.StatusRequestEntityTooLarge {
		t.Fatalf("11 bytes at a 10-byte cap: got %v, want %s", err, RuleZipTooLarge)
	}
}

// TestNormalizeEntrypoint: the form each runtime takes, checked without code, as create and
// update check it; Go takes handler.Handle (the other runtimes' module.function form) too.
func TestNormalizeEntrypoint(t *testing.T) {
	cases := []struct {
		runtime, ep, want string
		ok                bool
	}{
		{"go1.25", "", "Handle", true},
		{"go1.25", "Handle", "Handle", true},
		{"go1.25", "handler.Handle", "Handle", true},
		{"go1.25", "handler.handle", "", false}, // not exported
		{"go1.25", "main.Handle", "", false},
		{"go1.25", "Handle()", "", false},
		{"go1.25", "handler.Handle(event)", "", false},
		{"go1.25", strings.Repeat("H", 254), "", false},
		{"python3.11", "handler.handle()", "", false},
		{"python3.11", "1handler.handle", "", false},
		{"nodejs20", "1handler.handle", "", false}, // the CRD's pattern: a letter or _ first
		{"nodejs20", "handler.handle;x", "", false},
		{"python3.11", "", "handler.handle", true},
		{"python3.11", "pkg.mod.handle", "pkg.mod.handle", true},
		{"python3.11", "handle", "", false},
		{"python3.11", "pkg-x.handle", "", false},
		{"nodejs20", "src/index.handle", "src/index.handle", true},
		{"nodejs20", "../up.handle", "", false},
		{"nodejs20", "handle", "", false},
		{"cobol", "x", "", false},
	}
	for _, tc := range cases {
		got, err := NormalizeEntrypoint(tc.runtime, tc.ep)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("NormalizeEntrypoint(%q, %q) = %q, %v; want %q, ok=%v", tc.runtime, tc.ep, got, err, tc.want, tc.ok)
		}
		if ve, isVE := AsValidationError(err); isVE && ve.Rule == RuleInvalidEntrypoint && !strings.Contains(ve.Error(), "such as") {
			t.Errorf("%q for %s: the message %q does not say plainly what to use", tc.ep, tc.runtime, ve.Error())
		}
	}
}
