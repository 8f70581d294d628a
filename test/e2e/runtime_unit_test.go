//go:build e2e

package e2e

import (
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// TestContainerArgv pins the kubelet's rules the e2e runtime follows: command replaces the
// image's entrypoint and drops its cmd, args replace the cmd, $(VAR) expands from the
// container's environment ($$ escapes, unknown names stay).
func TestContainerArgv(t *testing.T) {
	img := v1.Config{Entrypoint: []string{"/kaniko/executor"}, Cmd: []string{"--help"}}
	env := map[string]string{"POD_NAMESPACE": "sless-system"}
	cases := map[string]struct {
		command, args []string
		image         v1.Config
		want          string
		err           bool
	}{
		"image entrypoint and cmd":    {image: img, want: "/kaniko/executor --help"},
		"args replace cmd":            {image: img, args: []string{"--context=s3://b/k"}, want: "/kaniko/executor --context=s3://b/k"},
		"command drops the image cmd": {image: img, command: []string{"/bin/sh"}, want: "/bin/sh"},
		"command and args":            {image: img, command: []string{"sless"}, args: []string{"operator"}, want: "sless operator"},
		"expansion":                   {image: img, args: []string{"--ns=$(POD_NAMESPACE)", "$$(POD_NAMESPACE)", "$(UNKNOWN)"}, want: "/kaniko/executor --ns=sless-system $(POD_NAMESPACE) $(UNKNOWN)"},
		"nothing to run":              {image: v1.Config{}, err: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := argv(tc.command, tc.args, tc.image, env)
			if (err != nil) != tc.err || strings.Join(got, " ") != tc.want {
				t.Errorf("argv = %q, %v; want %q (error %v)", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestImageUser(t *testing.T) {
	cases := map[string]struct {
		uid, gid int
		err      bool
	}{"": {0, 0, false}, "65532": {65532, 65532, false}, "65532:1000": {65532, 1000, false}, "nonroot": {err: true}, "1:x": {err: true}}
	for user, tc := range cases {
		uid, gid, err := imageUser(user)
		if (err != nil) != tc.err || !tc.err && (uid != tc.uid || gid != tc.gid) {
			t.Errorf("imageUser(%q) = %d, %d, %v", user, uid, gid, err)
		}
	}
}
