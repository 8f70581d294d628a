#!/usr/bin/env bash
# Builds stand-ins for the base images the Dockerfiles name (python, node, golang, alpine,
# and the platform image's distroless static base) from Debian packages and this machine's Go
# and Node, one layer tar each, cached under ~/.cache/sless-tools/base-images-<recipe hash>/
# with images.json describing their names and configs. Prints that directory. test/images
# pushes them to a test registry under the real names, so the Dockerfiles stay as in
# production. Cold: about 2 minutes (mmdebstrap; needs root and the Debian mirror). A second
# run is a cache hit and takes well under a second.
set -euo pipefail

CACHE=${SLESS_TOOLS_CACHE:-$HOME/.cache/sless-tools}
SUITE=${BASE_IMAGES_SUITE:-bookworm}
goroot=$(go env GOROOT)
node=$(command -v node)
npm=$(dirname "$(readlink -f "$(command -v npm)")")/..
# The platform Dockerfile's Go image (ARG GO_IMAGE=golang:<tag>) is served by this machine's Go
# as well, so TestPlatformDockerfile builds the file as it stands whatever Go the machine has.
dockerfile_go=$(sed -n 's/^ARG GO_IMAGE=golang:\(.*\)$/\1/p' "$(dirname "$0")/../../Dockerfile")
# The recipe is this script plus the toolchains copied in: a change to any is a new cache.
key=$({ cat "$0"; echo "$SUITE $dockerfile_go"; go version; "$node" --version; } | sha256sum | cut -c1-16)
OUT="$CACHE/base-images-$key"
log() { echo "base-images.sh: $*" >&2; }

if [ -f "$OUT/images.json" ]; then
  echo "$OUT"
  exit 0
fi
for tool in mmdebstrap busybox; do
  command -v "$tool" >/dev/null || { log "needs $tool (apt-get install mmdebstrap busybox-static)"; exit 1; }
done
mkdir -p "$CACHE"
exec 9>"$OUT.lock"
flock 9
[ -f "$OUT/images.json" ] && { echo "$OUT"; exit 0; }
tmp=$(mktemp -d "$CACHE/base-images.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS

# layer DIR NAME: one reproducible layer tar of DIR's content.
layer() {
  tar --numeric-owner --sort=name --mtime=@0 --pax-option=delete=atime,delete=ctime \
    -C "$1" -cf "$tmp/out/$2.tar" .
}
# users ROOT: passwd/group with root and the non-root user 65532 the images run as.
users() {
  mkdir -p "$1/etc" "$1/tmp" "$1/home/nonroot" "$1/root"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' > "$1/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\nnobody:x:65534:\n' > "$1/etc/group"
  chmod 1777 "$1/tmp"
  chown 65532:65532 "$1/home/nonroot"
}
# busybox ROOT: a static busybox with its applets as /bin links.
busybox_root() {
  mkdir -p "$1/bin"
  cp "$(command -v busybox)" "$1/bin/busybox"
  for a in $(busybox --list); do [ -e "$1/bin/$a" ] || ln -s busybox "$1/bin/$a"; done
}
mkdir -p "$tmp/out"

log "debootstrapping $SUITE (minbase) for python and node"
mmdebstrap --quiet --variant=minbase --include=ca-certificates,tzdata,python3,python-is-python3,python3-pip \
  "$SUITE" "$tmp/python" >&2
# The official images install with pip where Debian marks the system as externally managed.
rm -f "$tmp"/python/usr/lib/python3*/EXTERNALLY-MANAGED
mmdebstrap --quiet --variant=minbase --include=ca-certificates "$SUITE" "$tmp/node" >&2
# mmdebstrap leaves this machine's resolver and host name behind; images carry neither (the
# container runtime provides them), and a nameserver no pod reaches costs 5 s per lookup.
for r in "$tmp/python" "$tmp/node"; do
  rm -rf "$r"/var/lib/apt/lists/* "$r"/var/cache/apt/* "$r"/var/log/* "$r/etc/resolv.conf" "$r/etc/hostname"
done
mkdir -p "$tmp/node/usr/local/bin" "$tmp/node/usr/local/lib/node_modules"
cp "$node" "$tmp/node/usr/local/bin/node"
cp -a "$npm" "$tmp/node/usr/local/lib/node_modules/npm"
ln -s ../lib/node_modules/npm/bin/npm-cli.js "$tmp/node/usr/local/bin/npm"
ln -s ../lib/node_modules/npm/bin/npx-cli.js "$tmp/node/usr/local/bin/npx"
layer "$tmp/python" python
layer "$tmp/node" node

log "golang, alpine and static stand-ins"
busybox_root "$tmp/golang"
users "$tmp/golang"
mkdir -p "$tmp/golang/usr/local" "$tmp/golang/go"
cp -a "$goroot" "$tmp/golang/usr/local/go"
rm -rf "$tmp/golang/usr/local/go/pkg/obj" "$tmp/golang/usr/local/go/test"
layer "$tmp/golang" golang

busybox_root "$tmp/alpine"
users "$tmp/alpine"
mkdir -p "$tmp/alpine/etc/ssl/certs"
cp "$tmp/python/etc/ssl/certs/ca-certificates.crt" "$tmp/alpine/etc/ssl/certs/"
layer "$tmp/alpine" alpine

users "$tmp/static"
mkdir -p "$tmp/static/etc/ssl/certs" "$tmp/static/usr/share"
cp "$tmp/python/etc/ssl/certs/ca-certificates.crt" "$tmp/static/etc/ssl/certs/"
cp -a "$tmp/python/usr/share/zoneinfo" "$tmp/static/usr/share/zoneinfo"
layer "$tmp/static" static

path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
gover=$(go env GOVERSION)
golang_names="\"library/golang:1.23.12-alpine\", \"library/golang:1.25.3-alpine\", \"library/golang:${gover#go}-alpine\""
if [ -n "$dockerfile_go" ] && [ "$dockerfile_go" != "${gover#go}-alpine" ]; then
  golang_names="$golang_names, \"library/golang:$dockerfile_go\""
fi
cat > "$tmp/out/images.json" <<JSON
{"images": [
  {"layer": "python.tar", "names": ["library/python:3.11.13-slim-bookworm", "library/python:3.12.11-slim-bookworm"],
   "env": ["PATH=$path", "LANG=C.UTF-8"], "cmd": ["python3"]},
  {"layer": "node.tar", "names": ["library/node:20.19.4-bookworm-slim", "library/node:22.17.1-bookworm-slim"],
   "env": ["PATH=$path"], "cmd": ["node"]},
  {"layer": "golang.tar", "names": [$golang_names],
   "env": ["PATH=/go/bin:/usr/local/go/bin:$path", "GOPATH=/go", "GOLANG_VERSION=${gover#go}"], "workingDir": "/go", "cmd": ["/bin/sh"]},
  {"layer": "alpine.tar", "names": ["library/alpine:3.22.1"], "env": ["PATH=$path"], "cmd": ["/bin/sh"]},
  {"layer": "static.tar", "names": ["distroless/static-debian12:nonroot"], "platforms": ["linux/amd64", "linux/arm64"],
   "env": ["PATH=$path", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"], "user": "65532", "workingDir": "/home/nonroot"}
]}
JSON
mv "$tmp/out" "$OUT"
log "built $OUT in $((SECONDS - start))s ($(du -sh "$OUT" | cut -f1))"
echo "$OUT"
