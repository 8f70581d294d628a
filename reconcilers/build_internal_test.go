package reconcilers

import (
	"testing"

	"sless.dev/sless/scaling"
)

func TestUnreachableRegistry(t *testing.T) {
	opts := scaling.BuildOptions{Registry: "registry.e2e:5000/fn", RegistryMirrors: []string{"mirror.example"}}
	cases := map[string]struct{ log, want string }{
		"push registry refused":            {`error checking push permissions: Get "http://registry.e2e:5000/v2/": dial tcp 10.244.0.2:5000: connect: connection refused`, "registry.e2e:5000"},
		"mirror unknown":                   {`retrieving image "python:3.11": GET https://mirror.example/v2/library/python/manifests/3.11: dial tcp: lookup mirror.example: no such host`, "mirror.example"},
		"docker hub timeout":               {`GET https://index.docker.io/v2/library/node/manifests/20: dial tcp 1.2.3.4:443: i/o timeout`, "index.docker.io"},
		"syntax error":                     {`  File "handler/handler.py", line 1\n    def handle(:\n SyntaxError: invalid syntax`, ""},
		"network but no registry named":    {`pip: connection refused by pypi.org`, ""},
		"registry named, no network error": {`error pushing image: registry.e2e:5000/fn/ns/x: UNAUTHORIZED`, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := unreachableRegistry(tc.log, opts); got != tc.want {
				t.Errorf("unreachableRegistry = %q, want %q", got, tc.want)
			}
		})
	}
}
