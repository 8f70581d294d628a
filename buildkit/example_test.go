package buildkit_test

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"time"

	"sless.dev/sless/buildkit"
)

// The upload path of the gateway: validate, build the context, store both, describe the
// kaniko build.
func Example() {
	ctx := context.Background()
	upload := zipOf(map[string]string{"handler.py": "def handle(event):\n    return event\n"})

	src, err := buildkit.ValidateBytes(ctx, upload, "python3.11", "", buildkit.DefaultLimits())
	if err != nil {
		panic(err)
	}
	bc, err := buildkit.NewBuildContext(ctx, src)
	if err != nil {
		panic(err)
	}
	ts := buildkit.Timestamp(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	spec, err := buildkit.NewKanikoSpec(buildkit.ContextKey("team-a", "hello", ts), bc.Hash, "registry.local:5000", "team-a", "hello")
	if err != nil {
		panic(err)
	}
	fmt.Println(buildkit.ZipKey("team-a", "hello", ts))
	fmt.Println(spec.ContextKey)
	fmt.Println(spec.Dockerfile)
	fmt.Println(spec.Destination == "registry.local:5000/team-a/hello:"+bc.ImageTag())
	// Output:
	// functions/team-a/hello/20260102T030405.000000000Z.zip
	// contexts/team-a/hello/20260102T030405.000000000Z.tar.gz
	// Dockerfile
	// true
}

// A rejected upload carries the HTTP status and a message that says what to fix.
func ExampleValidationError() {
	upload := zipOf(map[string]string{"../../etc/passwd": "x"})
	_, err := buildkit.ValidateBytes(context.Background(), upload, "python3.11", "", buildkit.DefaultLimits())
	if ve, ok := buildkit.AsValidationError(err); ok {
		fmt.Println(ve.StatusCode() == http.StatusBadRequest, ve.Rule)
		fmt.Println(ve)
	}
	// Output:
	// true parent-path
	// invalid function source: paths may not contain .. components (file "../../etc/passwd"); zip the files relative to the function's directory
}

func zipOf(files map[string]string) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, body := range files {
		w, _ := zw.Create(name)
		w.Write([]byte(body))
	}
	zw.Close()
	return buf.Bytes()
}
