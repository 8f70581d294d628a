#!/usr/bin/env bash
# Builds HashiCorp Terraform (MPL-2.0; the last release before the BUSL change) from the Go
# module proxy and caches it under ~/.cache/sless-tools/terraform-<version>/. Prints the
# binary path, for TF_ACC_TERRAFORM_PATH. No release download is needed or attempted. A
# second run is a cache hit and takes well under a second.
set -euo pipefail

VERSION=${TERRAFORM_VERSION:-v1.5.7}
CACHE=${SLESS_TOOLS_CACHE:-$HOME/.cache/sless-tools}
OUT="$CACHE/terraform-$VERSION"
BIN="$OUT/terraform"

if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi
mkdir -p "$OUT"
# Concurrent first runs (several test packages) share one build instead of racing.
exec 9>"$OUT.lock"
flock 9
if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi
echo "terraform.sh: building terraform $VERSION from the module proxy (cold: about 3-5 minutes)" >&2
# A private GOBIN keeps the install away from the user's ~/go/bin; -mod=mod because the
# caller may run inside a module with a vendor directory or a different go.mod.
# A private directory per run: concurrent runs (make test beside a test that needs the tool)
# must not remove each other's build.
tmp=$(mktemp -d "$OUT/tmp.XXXXXX")
GOBIN="$tmp" GOFLAGS=-mod=mod CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" \
  "github.com/hashicorp/terraform@$VERSION" >&2
mv "$tmp/terraform" "$BIN"
rm -rf "$tmp"
echo "$BIN"
