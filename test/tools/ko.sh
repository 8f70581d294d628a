#!/usr/bin/env bash
# Builds ko (github.com/google/ko, Apache-2.0), the Knative/Kubernetes tool that builds Go
# images without Docker, from the Go module proxy and caches it under
# ~/.cache/sless-tools/ko-<version>/; prints the binary path. `make image` uses it. A second
# run is a cache hit and takes well under a second.
set -euo pipefail

VERSION=${KO_VERSION:-v0.19.1}
CACHE=${SLESS_TOOLS_CACHE:-$HOME/.cache/sless-tools}
OUT="$CACHE/ko-$VERSION"

log() { echo "ko.sh: $*" >&2; }
# shellcheck source=modbuild.sh
source "$(dirname "$0")/modbuild.sh"

cached "$OUT" "$OUT/ko" install_module_tool ko "github.com/google/ko@$VERSION" "$OUT"
echo "$OUT/ko"
