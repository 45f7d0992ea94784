# Shared helpers for the hack/ scripts. Source it; it defines functions and paths only.
HACK_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$HACK_DIR/.." && pwd)
# shellcheck source=versions.env
. "$HACK_DIR/versions.env"
export PATH=/usr/local/go/bin:$HOME/go/bin:$PATH

# Built tools live outside the work tree so a fresh clone on the same machine reuses them.
PORTER_CACHE=${PORTER_CACHE:-$HOME/.cache/porter}
TOOLS_BIN=${TOOLS_BIN:-$PORTER_CACHE/bin}

log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# timed NAME CMD...: runs CMD and prints how long it took.
timed() {
  local name=$1; shift
  local s e rc
  s=$(date +%s%N)
  "$@"; rc=$?
  e=$(date +%s%N)
  printf '[%s] %-30s %7.1fs%s
' "$(date -u +%H:%M:%S)" "$name" "$(awk -v a="$s" -v b="$e" 'BEGIN{print (b-a)/1e9}')" \
    "$([ $rc -eq 0 ] || echo " (exit $rc)")" >&2
  return $rc
}

# ensure_apt: installs the Debian packages in APT_PACKAGES that are missing.
ensure_apt() {
  local missing=()
  for p in $APT_PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "apt: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"
  }
}

# porter_ldflags: the link flags of the project's binaries. The version is the
# commit (with -dirty for local changes), so audit records say what ran.
porter_ldflags() {
  local v
  v=$(git -C "$REPO_ROOT" describe --always --dirty 2>/dev/null || echo dev)
  echo "-X github.com/porter-ci/porter/pkg/sidecar.Version=$v"
}
