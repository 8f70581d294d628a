#!/usr/bin/env bash
# Builds the real KEDA operator and the KEDA HTTP add-on (interceptor, scaler, operator) from
# the Go module proxy and caches them under ~/.cache/sless-tools/keda-<v>-http-add-on-<v>/.
# Prints that directory. `go install` refuses both projects (KEDA has a replace directive, the
# add-on's version list is not served), so each is built as a dependency of a throwaway module
# that carries the project's own go.mod requirements and replaces. One link at a time: each
# peaks near 2.5 GB. A second run is a cache hit and takes well under a second.
set -euo pipefail

KEDA_VERSION=${KEDA_VERSION:-v2.21.0}
ADDON_VERSION=${HTTP_ADDON_VERSION:-v0.15.0}
CACHE=${SLESS_TOOLS_CACHE:-$HOME/.cache/sless-tools}
OUT="$CACHE/keda-$KEDA_VERSION-http-add-on-$ADDON_VERSION"
# name=module@version:package, built in this order.
TARGETS=(
  "keda-operator=github.com/kedacore/keda/v2@$KEDA_VERSION:github.com/kedacore/keda/v2/cmd/operator"
  "interceptor=github.com/kedacore/http-add-on@$ADDON_VERSION:github.com/kedacore/http-add-on/interceptor"
  "scaler=github.com/kedacore/http-add-on@$ADDON_VERSION:github.com/kedacore/http-add-on/scaler"
  "http-operator=github.com/kedacore/http-add-on@$ADDON_VERSION:github.com/kedacore/http-add-on/operator"
)

log() { echo "keda.sh: $*" >&2; }

build_one() { # name module version pkg
  local name=$1 mod=$2 ver=$3 pkg=$4 work info gomod gosum
  work=$(mktemp -d)
  info=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "$mod@$ver")
  gomod=$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' <<<"$info")
  gosum=$(sed -n 's/.*"Dir": "\(.*\)".*/\1/p' <<<"$info")/go.sum
  # The project's go.mod, renamed, requiring the project itself: same dependency graph and
  # the same replace directives as the project's own release build.
  sed "s#^module .*#module sless.local/keda-tool-$name#" "$gomod" > "$work/go.mod"
  printf '\nrequire %s %s\n' "$mod" "$ver" >> "$work/go.mod"
  cp "$gosum" "$work/go.sum"
  chmod u+w "$work/go.mod" "$work/go.sum"
  log "building $name from $mod@$ver (cold: several minutes)"
  local start=$SECONDS
  (cd "$work" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$OUT/$name.tmp.$$" "$pkg" >&2)
  mv "$OUT/$name.tmp.$$" "$OUT/$name"
  rm -rf "$work"
  log "built $OUT/$name in $((SECONDS - start))s"
}

mkdir -p "$OUT"
for t in "${TARGETS[@]}"; do
  name=${t%%=*}; rest=${t#*=}
  modver=${rest%%:*}; pkg=${rest#*:}
  [ -x "$OUT/$name" ] && continue
  build_one "$name" "${modver%@*}" "${modver#*@}" "$pkg"
done
echo "$OUT"
