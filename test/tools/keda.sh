#!/usr/bin/env bash
# Builds the real KEDA operator, its metrics API server (the external-metrics adapter the HPA
# reads) and the KEDA HTTP add-on (interceptor, scaler, operator) from
# the Go module proxy and caches them under ~/.cache/sless-tools/keda-<v>-http-add-on-<v>/.
# Prints that directory. `go install` refuses both projects (KEDA has a replace directive, the
# add-on's version list is not served): see modbuild.sh. One link at a time: each peaks near
# 2.5 GB. A second run is a cache hit and takes well under a second.
set -euo pipefail

KEDA_VERSION=${KEDA_VERSION:-v2.21.0}
ADDON_VERSION=${HTTP_ADDON_VERSION:-v0.15.0}
CACHE=${SLESS_TOOLS_CACHE:-$HOME/.cache/sless-tools}
OUT="$CACHE/keda-$KEDA_VERSION-http-add-on-$ADDON_VERSION"
# name=module@version:package, built in this order.
TARGETS=(
  "keda-operator=github.com/kedacore/keda/v2@$KEDA_VERSION:github.com/kedacore/keda/v2/cmd/operator"
  "keda-adapter=github.com/kedacore/keda/v2@$KEDA_VERSION:github.com/kedacore/keda/v2/cmd/adapter"
  "interceptor=github.com/kedacore/http-add-on@$ADDON_VERSION:github.com/kedacore/http-add-on/interceptor"
  "scaler=github.com/kedacore/http-add-on@$ADDON_VERSION:github.com/kedacore/http-add-on/scaler"
  "http-operator=github.com/kedacore/http-add-on@$ADDON_VERSION:github.com/kedacore/http-add-on/operator"
)

log() { echo "keda.sh: $*" >&2; }
# shellcheck source=modbuild.sh
source "$(dirname "$0")/modbuild.sh"

mkdir -p "$OUT"
for t in "${TARGETS[@]}"; do
  name=${t%%=*}; rest=${t#*=}
  modver=${rest%%:*}; pkg=${rest#*:}
  [ -x "$OUT/$name" ] && continue
  build_module_tool "$name" "${modver%@*}" "${modver#*@}" "$pkg" "$OUT"
done
echo "$OUT"
