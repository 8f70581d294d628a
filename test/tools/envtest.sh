#!/usr/bin/env bash
# Builds kube-apiserver and etcd from the Go module proxy (no prebuilt downloads exist here)
# and caches them under ~/.cache/sless-tools/envtest-<version>/. Prints the directory to use
# as KUBEBUILDER_ASSETS. A second run is a cache hit and takes well under a second.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
CACHE=${SLESS_TOOLS_CACHE:-$HOME/.cache/sless-tools}
OUT="$CACHE/envtest-$K8S_VERSION-etcd-$ETCD_VERSION"
# Extra Kubernetes commands (e.g. kube-controller-manager for the e2e ground) may be asked for.
COMMANDS=${K8S_COMMANDS:-kube-apiserver}

log() { echo "envtest.sh: $*" >&2; }

missing() {
  need_build=()
  for c in $COMMANDS; do [ -x "$OUT/$c" ] || need_build+=("$c"); done
  [ ${#need_build[@]} -gt 0 ] || [ ! -x "$OUT/etcd" ]
}
if ! missing; then
  echo "$OUT"
  exit 0
fi
# A lock beside the cache: concurrent first runs (make test beside make test-e2e) build once.
mkdir -p "$OUT"
exec 9>"$OUT.lock"
flock 9
missing || true
export GOFLAGS=-mod=mod CGO_ENABLED=0

if [ ${#need_build[@]} -gt 0 ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  log "building ${need_build[*]} $K8S_VERSION from the module proxy (cold: several minutes)"
  gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  staging_version="v0${K8S_VERSION#v1}"
  {
    echo "module sless.local/k8s-tools"
    echo "go 1.26"
    echo "require k8s.io/kubernetes $K8S_VERSION"
    # kubernetes' own go.mod points every k8s.io/* staging module at ./staging; pin the
    # published versions of the same modules instead.
    grep -E '^\s*k8s\.io/[^ ]+ => \./staging/' "$gomod" | awk -v v="$staging_version" '{print "replace " $1 " => " $1 " " v}'
    for c in "${need_build[@]}"; do echo "tool k8s.io/kubernetes/cmd/$c"; done
  } > "$work/go.mod"
  (cd "$work" && go mod tidy >&2)
  minor=$(echo "$K8S_VERSION" | cut -d. -f2)
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  # One link at a time: each peaks near 2.5 GB.
  for c in "${need_build[@]}"; do
    (cd "$work" && go build -trimpath -ldflags "$ldflags" -o "$OUT/$c.tmp.$$" "k8s.io/kubernetes/cmd/$c" >&2)
    mv "$OUT/$c.tmp.$$" "$OUT/$c"
    log "built $OUT/$c"
  done
fi

if [ ! -x "$OUT/etcd" ]; then
  ework=$(mktemp -d)
  log "building etcd $ETCD_VERSION from the module proxy"
  printf 'module sless.local/etcd-tool\ngo 1.26\nrequire go.etcd.io/etcd/server/v3 %s\ntool go.etcd.io/etcd/server/v3\n' "$ETCD_VERSION" > "$ework/go.mod"
  (cd "$ework" && go mod tidy >&2 && go build -trimpath -ldflags "-s -w" -o "$OUT/etcd.tmp.$$" go.etcd.io/etcd/server/v3 >&2)
  mv "$OUT/etcd.tmp.$$" "$OUT/etcd"
  rm -rf "$ework"
  log "built $OUT/etcd"
fi
echo "$OUT"
