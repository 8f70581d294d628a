#!/usr/bin/env bash
# Brings a machine to what the tests need: running PostgreSQL and RabbitMQ, Debian packages,
# and the tools built from source (cached under ~/.cache/sless-tools). Idempotent and quick
# when everything is already there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
log() { echo "deps.sh: $*" >&2; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {
  for _ in $(seq 1 60); do port_open "$1" && return 0; sleep 1; done
  log "port $1 did not open"; return 1
}

if ! port_open 5432; then
  log "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start
  wait_port 5432
fi
if ! port_open 5672; then
  log "starting RabbitMQ"
  rabbitmq-server -detached
  wait_port 5672
fi

# Headless Chromium drives the console tests; slirp4netns connects sless dev's sandboxed
# functions to the network; mmdebstrap and a static busybox build the base-image stand-ins
# (base-images.sh).
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v slirp4netns >/dev/null || missing+=(slirp4netns) # sless dev's function network
command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
[ -x /bin/busybox ] || missing+=(busybox-static)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]} (Debian packages)"
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
fi

# Tools built from source once and cached (a cache hit takes milliseconds), in two lanes at
# once: the envtest build mostly waits on module downloads while KEDA's compiles, and two
# links (each peaks near 2.5 GB) fit in memory. Each tool takes a lock of its own.
# kube-controller-manager, kube-scheduler, KEDA + the HTTP add-on and kaniko serve the e2e
# suite (make test-e2e); ko and the base-image stand-ins serve make image and both suites;
# node.sh adds the Node.js of nodejs22 for the runtime contract test (make test).
export K8S_COMMANDS="kube-apiserver kube-controller-manager kube-scheduler"
lane() {
  for tool in "$@"; do
    t0=$(date +%s)
    bash "$here/$tool" >/dev/null || { log "$tool failed"; return 1; }
    log "$tool ready ($(( $(date +%s) - t0 ))s)"
  done
}
lane envtest.sh terraform.sh ko.sh base-images.sh & a=$!
lane keda.sh kaniko.sh versitygw.sh node.sh & b=$!
rc=0
wait "$a" || rc=1
wait "$b" || rc=1
exit "$rc"
