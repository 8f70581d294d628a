# Sourced by the tool scripts: build_module_tool builds a command of a Go project that
# `go install` refuses (replace directives, a version list the proxy does not serve) as a
# dependency of a throwaway module carrying the project's own go.mod requirements and
# replaces, so the dependency graph is the one of the project's own release build.
#   build_module_tool NAME MODULE VERSION PACKAGE OUT-DIR
# writes OUT-DIR/NAME. Needs log() from the caller.
build_module_tool() {
  local name=$1 mod=$2 ver=$3 pkg=$4 out=$5 work info gomod gosum
  work=$(mktemp -d)
  info=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "$mod@$ver")
  gomod=$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' <<<"$info")
  gosum=$(sed -n 's/.*"Dir": "\(.*\)".*/\1/p' <<<"$info")/go.sum
  sed "s#^module .*#module sless.local/tool-$name#" "$gomod" > "$work/go.mod"
  printf '\nrequire %s %s\n' "$mod" "$ver" >> "$work/go.mod"
  cp "$gosum" "$work/go.sum"
  chmod u+w "$work/go.mod" "$work/go.sum"
  log "building $name from $mod@$ver (cold: several minutes)"
  local start=$SECONDS
  (cd "$work" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/$name.tmp.$$" "$pkg" >&2)
  mv "$out/$name.tmp.$$" "$out/$name"
  rm -rf "$work"
  log "built $out/$name in $((SECONDS - start))s"
}

# install_module_tool installs MODULE/CMD@VERSION (a project `go install` accepts) as
# OUT-DIR/NAME through a private GOBIN per run, so concurrent first runs never remove each
# other's build.
#   install_module_tool NAME PACKAGE@VERSION OUT-DIR
install_module_tool() {
  local name=$1 pkg=$2 out=$3 tmp
  tmp=$(mktemp -d "$out/tmp.XXXXXX")
  log "installing $pkg (cold: a few minutes)"
  GOBIN="$tmp" GOFLAGS=-mod=mod CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "$pkg" >&2
  mv "$tmp/$name" "$out/$name"
  rm -rf "$tmp"
}

# cached OUT-DIR FILE COMMAND...: runs COMMAND (which makes FILE) unless FILE exists, under a
# lock beside OUT-DIR so concurrent first runs build once.
cached() {
  local out=$1 file=$2
  shift 2
  [ -x "$file" ] && return 0
  mkdir -p "$out"
  exec 9>"$out.lock"
  flock 9
  [ -x "$file" ] || "$@"
}
