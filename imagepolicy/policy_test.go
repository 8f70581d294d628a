package imagepolicy_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"

	"sless.dev/sless/imagepolicy"
)

func TestCheck(t *testing.T) {
	policy := func(platform string, allowed ...string) imagepolicy.Policy {
		p, err := imagepolicy.New(platform, allowed)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	defaults := policy("registry.sless-system:5000", "kind.local", "ko.local", "dev.local")
	withPath := policy("ghcr.io/acme/functions", "ghcr.io/acme", "docker.io/library", "10.0.0.7:5000/mirror")
	cases := []struct {
		name   string
		policy imagepolicy.Policy
		ns     string
		image  string
		// refused: "" allowed, else a text the refusal must contain.
		refused string
	}{
		{"own built image", defaults, "team-a", "registry.sless-system:5000/team-a/hello:sha-0123", ""},
		{"own image by digest", defaults, "team-a", "registry.sless-system:5000/team-a/app@sha256:" + strings.Repeat("a", 64), ""},
		{"own namespace, nested path", defaults, "team-a", "registry.sless-system:5000/team-a/tools/x:1", ""},
		{"another tenant's built image", defaults, "team-b", "registry.sless-system:5000/team-a/hello:sha-0123", "outside namespace team-b's images"},
		{"a namespace sharing a prefix", defaults, "team", "registry.sless-system:5000/team-a/hello:1", "outside namespace team's images"},
		{"the platform registry outside any namespace", defaults, "team-a", "registry.sless-system:5000/sless:1", "outside namespace team-a's images"},
		{"same host, other port", defaults, "team-a", "registry.sless-system:5001/team-a/x:1", "registry registry.sless-system:5001 is not allowed"},
		{"loopback", defaults, "team-a", "127.0.0.1:5000/x:y", "registry 127.0.0.1:5000 is not allowed"},
		{"metadata address", defaults, "team-a", "169.254.169.254/latest:meta", "registry 169.254.169.254 is not allowed"},
		{"Docker Hub by default", defaults, "team-a", "python:3.12", "registry index.docker.io is not allowed"},
		{"names loaded into the nodes", defaults, "team-a", "ko.local/app:1", ""},
		{"kind.local", defaults, "team-a", "kind.local/app@sha256:" + strings.Repeat("b", 64), ""},
		{"platform path: own namespace", withPath, "team-a", "ghcr.io/acme/functions/team-a/f:1", ""},
		{"platform path wins over a wider allowance", withPath, "team-a", "ghcr.io/acme/functions/team-b/f:1", "outside namespace team-a's images"},
		{"allowed path", withPath, "team-a", "ghcr.io/acme/base:1", ""},
		{"allowed path is a path prefix, not a string prefix", withPath, "team-a", "ghcr.io/acmex/base:1", "registry ghcr.io is not allowed"},
		{"docker.io entry matches Docker Hub references", withPath, "team-a", "python:3.12", ""},
		{"docker.io entry keeps its path", withPath, "team-a", "docker.io/someone/x:1", "registry index.docker.io is not allowed"},
		{"private allowed registry", withPath, "team-a", "10.0.0.7:5000/mirror/x:1", ""},
		{"private allowed registry, other path", withPath, "team-a", "10.0.0.7:5000/other/x:1", "registry 10.0.0.7:5000 is not allowed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ref, err := name.ParseReference(c.image)
			if err != nil {
				t.Fatal(err)
			}
			err = c.policy.Check(ref, c.ns)
			var refusal *imagepolicy.Refusal
			switch {
			case c.refused == "" && err != nil:
				t.Errorf("refused: %v", err)
			case c.refused != "" && !errors.As(err, &refusal):
				t.Errorf("allowed (%v), want a refusal containing %q", err, c.refused)
			case c.refused != "" && !strings.Contains(err.Error(), c.refused):
				t.Errorf("refusal %q, want it to contain %q", err, c.refused)
			case c.refused != "" && strings.Contains(c.refused, "is not allowed") && !strings.Contains(err.Error(), imagepolicy.FlagAllowedRegistries):
				t.Errorf("refusal %q does not name %s", err, imagepolicy.FlagAllowedRegistries)
			}
		})
	}
}

func TestNewRefusesBadRegistries(t *testing.T) {
	for _, c := range []struct {
		platform string
		allowed  []string
	}{
		{"", nil},
		{"registry:5000", []string{"https://ghcr.io"}},
		{"registry:5000", []string{"ghcr.io/UPPER"}},
		{"registry:5000", []string{"/path"}},
	} {
		if _, err := imagepolicy.New(c.platform, c.allowed); err == nil {
			t.Errorf("New(%q, %q) accepted", c.platform, c.allowed)
		}
	}
	if _, err := imagepolicy.New("registry.sless-system:5000/", []string{"", " ghcr.io/acme/ "}); err != nil {
		t.Errorf("a trailing slash, blanks: %v", err)
	}
}

// TestOwnImage: the platform's pull secret goes only with a tenant's own platform images.
func TestOwnImage(t *testing.T) {
	for _, c := range []struct {
		registry, ns, image string
		want                bool
	}{
		{"registry.sless-system:5000", "team-a", "registry.sless-system:5000/team-a/hello:sha-0123", true},
		{"registry.sless-system:5000", "team-a", "registry.sless-system:5000/team-a/hello@sha256:" + strings.Repeat("c", 64), true},
		{"registry.sless-system:5000/", "team-a", "registry.sless-system:5000/team-a/hello:1", true},
		{"registry.sless-system:5000", "team-b", "registry.sless-system:5000/team-a/hello:1", false},
		{"registry.sless-system:5000", "team", "registry.sless-system:5000/team-a/hello:1", false},
		{"registry.sless-system:5000", "team-a", "ghcr.io/team-a/hello:1", false},
		{"registry.sless-system:5000", "team-a", "ko.local/hello:1", false},
		{"registry.sless-system:5000", "team-a", "not a reference", false},
		{"registry.sless-system:5000", "", "registry.sless-system:5000/team-a/hello:1", false},
		{"docker.io/acme", "team-a", "docker.io/acme/team-a/f:1", true},
		{"docker.io/acme", "team-a", "index.docker.io/acme/team-a/f:1", true},
		{"docker.io/acme", "team-a", "docker.io/acme/team-b/f:1", false},
	} {
		if got := imagepolicy.OwnImage(c.registry, c.ns, c.image); got != c.want {
			t.Errorf("OwnImage(%q, %q, %q) = %v, want %v", c.registry, c.ns, c.image, got, c.want)
		}
	}
}
