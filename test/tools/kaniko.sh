#!/usr/bin/env bash
# Builds the real kaniko executor from the Go module proxy and caches it under
# ~/.cache/sless-tools/kaniko-<version>/executor; prints that directory. The default is the
# release the operator's default image carries (upstream's last, v1.24.0); the maintained
# fork builds the same way: KANIKO_MODULE=github.com/chainguard-dev/kaniko KANIKO_VERSION=v1.25.5.
# `go install` refuses kaniko (its version list is not served), see modbuild.sh. Cold: 2-4 min,
# ~870 MB peak. A second run is a cache hit and takes well under a second.
set -euo pipefail

MODULE=${KANIKO_MODULE:-github.com/GoogleContainerTools/kaniko}
VERSION=${KANIKO_VERSION:-v1.24.0}
CACHE=${SLESS_TOOLS_CACHE:-$HOME/.cache/sless-tools}
OUT="$CACHE/kaniko-$(basename "$(dirname "$MODULE")")-$VERSION"

log() { echo "kaniko.sh: $*" >&2; }
# shellcheck source=modbuild.sh
source "$(dirname "$0")/modbuild.sh"

cached "$OUT" "$OUT/executor" build_module_tool executor "$MODULE" "$VERSION" "$MODULE/cmd/executor" "$OUT"
echo "$OUT"
