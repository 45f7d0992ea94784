#!/usr/bin/env bash
# Builds the local-only images the tests run, with the classic builder (no registry is
# reachable, so nothing may be pulled: every image is FROM scratch plus a static binary
# built by hack/build-tools.sh). Idempotent: an image whose label records the same
# binary digest is kept as is.
#
# usage: hack/images-docker.sh minio
set -euo pipefail
. "$(dirname "$0")/lib.sh"

# wait_for_tool NAME: another hack/build-tools.sh may be compiling NAME right now;
# its version stamp appears only once the binary is in place.
wait_for_tool() {
  local name=$1 stamp=$TOOLS_BIN/.$1.version waited=0
  if ! pgrep -f "build-tools.sh" >/dev/null; then
    "$HACK_DIR/build-tools.sh" "$name" # quick when the binary is up to date
  fi
  while [ ! -f "$stamp" ]; do
    [ $((waited % 60)) -eq 0 ] && log "waiting for $TOOLS_BIN/$name (being built by hack/build-tools.sh)"
    sleep 5; waited=$((waited + 5))
    [ $waited -lt 3600 ] || { log "gave up waiting for $name after 1h"; return 1; }
  done
}

# build_scratch_image TAG BINARY ENTRYPOINT...: FROM scratch + BINARY as /<name>.
build_scratch_image() {
  local tag=$1 bin=$2 name digest current ctx
  name=$(basename "$bin")
  digest=sha256:$(sha256sum "$bin" | cut -d' ' -f1)
  current=$(docker image inspect -f '{{ index .Config.Labels "dev.porter.binary-digest" }}' "$tag" 2>/dev/null || true)
  if [ "$current" = "$digest" ]; then
    log "$tag: up to date ($digest)"
    return 0
  fi
  ctx=$(mktemp -d)
  # A hard link keeps the build context cheap; fall back to a copy across filesystems.
  ln "$bin" "$ctx/$name" 2>/dev/null || cp "$bin" "$ctx/$name"
  cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM scratch
COPY $name /$name
LABEL dev.porter.binary-digest="$digest"
ENTRYPOINT ["/$name"]
DOCKERFILE
  # The classic builder needs no BuildKit/registry; its deprecation notice is noise.
  if ! out=$(DOCKER_BUILDKIT=0 docker build -q -t "$tag" "$ctx" 2>&1); then
    rm -rf "$ctx"
    printf '%s\n' "$out" >&2
    return 1
  fi
  rm -rf "$ctx"
  log "$tag: built ($digest)"
}

minio_image() {
  wait_for_tool minio
  build_scratch_image porter/minio:dev "$TOOLS_BIN/minio"
}

[ $# -gt 0 ] || set -- minio
for img in "$@"; do
  case $img in
    minio) timed "image porter/minio:dev" minio_image ;;
    *) echo "unknown image: $img (known: minio)" >&2; exit 2 ;;
  esac
done
