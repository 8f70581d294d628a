// Package runtimes holds the language wrappers that run user functions and the Dockerfiles
// that build function images from them. The files are programs of their own (stdlib only);
// this package only embeds them so buildkit can write them into build contexts.
package runtimes

import "embed"

// FS holds go/, python/ and node/: each a server source and the Dockerfile that uses it.
//
//go:embed go/server/server.go go/Dockerfile python/server.py python/Dockerfile node/server.js node/Dockerfile
var FS embed.FS
