#!/usr/bin/env bash
# Builds a command of a Go project that `go install` accepts from the Go module proxy and
# caches it under ~/.cache/sless-tools/<name>-<version>/; prints the binary path. A second
# run is a cache hit and takes well under a second. No release download is attempted.
#   goinstall.sh NAME PACKAGE VERSION
set -euo pipefail
name=$1 pkg=$2 version=$3
out="${SLESS_TOOLS_CACHE:-$HOME/.cache/sless-tools}/$name-$version"

log() { echo "$name: $*" >&2; }
# shellcheck source=modbuild.sh
source "$(dirname "$0")/modbuild.sh"

cached "$out" "$out/$name" install_module_tool "$name" "$pkg@$version" "$out"
echo "$out/$name"
