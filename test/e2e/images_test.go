//go:build e2e

package e2e

import (
	"archive/tar"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"k8s.io/utils/ptr"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/test/images"
)

// runtimeCases are one function per language, answering {"message": "hello, <name>"}.
var runtimeCases = []struct {
	runtime string
	files   map[string]string
	// paths the image's user must be able to read (directories: list and enter).
	reach []string
}{
	{runtime: "python3.11", files: map[string]string{"handler.py": helloPython},
		reach: []string{"app", "app/server/server.py", "app/handler/handler.py", "app/handler/__pycache__/handler.cpython-311.pyc"}},
	{runtime: "nodejs20", files: map[string]string{"handler.js": "exports.handle = async (event) => ({message: 'hello, ' + (event.name || 'world'), method: 'POST'});\n"},
		reach: []string{"app", "app/server/server.js", "app/handler/handler.js"}},
	{runtime: "go1.25", files: map[string]string{"handler.go": `package handler

func Handle(event map[string]interface{}) interface{} {
	name, _ := event["name"].(string)
	return map[string]interface{}{"message": "hello, " + name, "method": "POST"}
}
`}, reach: []string{"usr/local/bin/function"}},
}

// TestFunctionImages builds one function per runtime with the real kaniko through the
// operator, twice from the same source in two tenants, and inspects what was pushed: the same
// digest both times (reproducible), USER 65532 able to reach its workdir and files, no build
// context inside; then each answers a request, started by the kubelet as that user.
func TestFunctionImages(t *testing.T) {
	t.Parallel()
	a, b := newTenant(t), newTenant(t)
	start := time.Now()
	for _, tn := range []tenant{a, b} {
		for _, rc := range runtimeCases {
			createAndUpload(t, tn, "img-"+strings.TrimRight(rc.runtime, "0123456789."), imageFields(rc.runtime), rc.files)
		}
	}
	for _, rc := range runtimeCases {
		name := "img-" + strings.TrimRight(rc.runtime, "0123456789.")
		t.Run(rc.runtime, func(t *testing.T) {
			fa, fb := waitReady(t, a, name), waitReady(t, b, name)
			t.Logf("%s: both built within %s of the uploads", rc.runtime, time.Since(start).Round(time.Second))
			da, db := imageDigest(t, fa.Status.Image), imageDigest(t, fb.Status.Image)
			if da != db {
				t.Errorf("the same source built into %s and %s: digests %s and %s differ", fa.Status.Image, fb.Status.Image, da, db)
			}
			inspectImage(t, fa.Status.Image, rc.reach)
			t.Logf("%s image: %.1f MB compressed", rc.runtime, float64(compressedSize(t, fa.Status.Image))/1e6)
			waitServiceResolvable(t, a, name)
			resp, body := invoke(t, a, name, `{"name": "image"}`)
			checkHello(t, resp, body, "image")
		})
	}
}

func imageFields(runtime string) api.FunctionFields {
	f := helloFields(5)
	f.Runtime = ptr.To(runtime)
	return f
}

func imageDigest(t *testing.T, ref string) string {
	t.Helper()
	r, err := images.Ref(ref)
	if err != nil {
		t.Fatal(err)
	}
	d, err := remote.Head(r)
	if err != nil {
		t.Fatalf("%s in the registry: %v", ref, err)
	}
	return d.Digest.String()
}

// inspectImage reads the image's filesystem as the kubelet unpacks it and checks that the
// image's user reaches every path of reach (and every directory on the way), and that no
// build context came along.
func inspectImage(t *testing.T, ref string, reach []string) {
	t.Helper()
	img := pull(t, ref)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	uid, gid, err := imageUser(cf.Config.User)
	if err != nil || uid != 65532 {
		t.Fatalf("image user %q (%v), want 65532", cf.Config.User, err)
	}
	entries := map[string]*tar.Header{}
	err = images.Walk(img, func(name string, h *tar.Header, r io.Reader) error {
		entries[name] = h
		if path.Base(name) == "context.tar.gz" {
			t.Errorf("the image holds the build context: /%s", name)
		}
		// Bytecode keyed by its source's hash (PEP 552 flags 0b11), not the COPY's mtime,
		// is what makes a Python image reproducible.
		if strings.HasPrefix(name, "app/") && strings.HasSuffix(name, ".pyc") {
			head := make([]byte, 8)
			if _, err := io.ReadFull(r, head); err != nil || binary.LittleEndian.Uint32(head[4:]) != 0b11 {
				t.Errorf("/%s is not checked-hash bytecode (header %x, %v)", name, head, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range reach {
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if h := entries[dir]; h != nil && !allowed(h, uid, gid, 0o1) {
				t.Errorf("/%s (%o %d:%d) cannot be entered by %d:%d", dir, h.Mode, h.Uid, h.Gid, uid, gid)
			}
		}
		h := entries[p]
		if h == nil {
			t.Errorf("the image has no /%s", p)
			continue
		}
		want := int64(0o4)
		if h.Typeflag == tar.TypeDir {
			want = 0o5
		}
		if !allowed(h, uid, gid, want) {
			t.Errorf("/%s (%o %d:%d) cannot be read by %d:%d", p, h.Mode, h.Uid, h.Gid, uid, gid)
		}
	}
}

// allowed applies the owner, group or other bits of h to uid:gid for the permission bits want
// (r=4, w=2, x=1).
func allowed(h *tar.Header, uid, gid int, want int64) bool {
	mode := h.Mode & 0o7
	switch {
	case h.Uid == uid:
		mode = h.Mode >> 6 & 0o7
	case h.Gid == gid:
		mode = h.Mode >> 3 & 0o7
	}
	return mode&want == want
}

// TestBuildFigures measures upload → Ready through the real kaniko per runtime, one build
// at a time, SLESS_E2E_BUILDS sources each (default 3), and the compressed size of each
// function image. A figure test (make bench). With SLESS_E2E_FIGURES=file the table is
// appended there.
func TestBuildFigures(t *testing.T) {
	figureTest(t)
	n, _ := strconv.Atoi(os.Getenv("SLESS_E2E_BUILDS"))
	if n <= 0 {
		n = 3
	}
	tn := newTenant(t)
	var b strings.Builder
	fmt.Fprintf(&b, "| runtime (%d builds each) | upload → Ready p50 | min | max | image (compressed) |\n|---|---|---|---|---|\n", n)
	for _, rc := range runtimeCases {
		var took []time.Duration
		var size int64
		for i := 0; i < n; i++ {
			name := fmt.Sprintf("fig-%s-%d", strings.TrimRight(rc.runtime, "0123456789."), i)
			files := map[string]string{}
			for f, body := range rc.files { // a source of its own: nothing is built twice
				files[f] = body + map[bool]string{true: "\n# ", false: "\n// "}[strings.HasSuffix(f, ".py")] + name + "\n"
			}
			start := time.Now()
			createAndUpload(t, tn, name, imageFields(rc.runtime), files)
			fn := waitReady(t, tn, name)
			took = append(took, time.Since(start))
			size = compressedSize(t, fn.Status.Image)
		}
		sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.1f MB |\n", rc.runtime, fmtDur(percentile(took, 50)), fmtDur(took[0]), fmtDur(took[len(took)-1]), float64(size)/1e6)
	}
	t.Log("\n" + b.String())
	if f := os.Getenv("SLESS_E2E_FIGURES"); f != "" {
		out, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		_, _ = out.WriteString(b.String())
	}
}

// pull fetches ref from the e2e registry.
func pull(t *testing.T, ref string) v1.Image {
	t.Helper()
	img, err := images.Pull(ref)
	if err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	return img
}

// compressedSize is what a node downloads for ref: its layers as stored in the registry.
func compressedSize(t *testing.T, ref string) int64 {
	t.Helper()
	m, err := pull(t, ref).Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, l := range m.Layers {
		n += l.Size
	}
	return n
}
