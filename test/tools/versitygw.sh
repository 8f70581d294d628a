#!/usr/bin/env bash
# Builds the versitygw S3 gateway (Apache-2.0) from the Go module proxy and caches it under
# ~/.cache/sless-tools/versitygw-<version>/. Prints the binary path. A second run is a cache
# hit and takes well under a second.
set -euo pipefail

VERSION=${VERSITYGW_VERSION:-v1.8.0}
CACHE=${SLESS_TOOLS_CACHE:-$HOME/.cache/sless-tools}
OUT="$CACHE/versitygw-$VERSION"
BIN="$OUT/versitygw"

if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi
# A lock beside the cache: concurrent first runs build once.
mkdir -p "$OUT"
exec 9>"$OUT.lock"
flock 9
if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi
echo "versitygw.sh: building versitygw $VERSION from the module proxy (cold: a few minutes)" >&2
# A private GOBIN keeps the install away from the user's ~/go/bin; -mod=mod because the
# caller may run inside a module with a vendor directory or a different go.mod.
tmp=$(mktemp -d "$OUT/tmp.XXXXXX")
GOBIN="$tmp" GOFLAGS=-mod=mod CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" \
  "github.com/versity/versitygw/cmd/versitygw@$VERSION" >&2
mv "$tmp/versitygw" "$BIN"
rm -rf "$tmp"
echo "$BIN"
