// Package runtimes holds the language wrappers that run user functions and the Dockerfiles
// that build function images from them. The files are programs of their own (stdlib only);
// this package only embeds them so buildkit can write them into build contexts.
package runtimes

import "embed"

// FS holds go/, python/ and node/: each a wrapper (Wrapper) and the Dockerfile that uses it.
//
//go:embed go/server/server.go go/server/identity.go go/Dockerfile python/server.py python/sless_identity.py python/Dockerfile node/server.js node/sless_identity.js node/Dockerfile
var FS embed.FS

// Wrapper lists the files of language's wrapper in FS (language: go, python or node): the
// server, then the verifier of signed calls it loads; a build context's server/ holds them.
func Wrapper(language string) []string {
	return map[string][]string{
		"go":     {"go/server/server.go", "go/server/identity.go"},
		"python": {"python/server.py", "python/sless_identity.py"},
		"node":   {"node/server.js", "node/sless_identity.js"},
	}[language]
}
