#!/usr/bin/env bash
# Builds the images the local cluster runs and imports them into its containerd.
# Nothing can be pulled there, so every image is assembled here from local files
# (hack/tools/mkimage writes an OCI archive; no dockerd, no registry) and cached in
# $IMAGE_CACHE. When the cluster is up the archives are imported with
# `ctr -n k8s.io images import`; an image whose digest containerd already has is
# skipped. When it is down, cluster-up imports the cached archives.
#
# After importing, every cached image of the groups in PUSH_GROUPS is also pushed
# to the cluster's registry (deploy/registry) with hack/tools/ocipush, under the
# same path and tag without the domain: docker.io/library/busybox:latest becomes
# $REGISTRY_ADDR/library/busybox:latest, porter.local/porter:dev
# $REGISTRY_ADDR/porter:dev (pushed through the read-write instance at
# $REGISTRY_PUSH_ADDR, pulled from the read-only one at $REGISTRY_ADDR). An
# image the registry already has is not pushed again.
#
# usage: hack/images.sh [--no-import|--no-push|--import-cached|--push-cached] [GROUP|NAME...]   (default: every image)
#   --no-import      build the archives only
#   --no-push        build and import, do not push (e.g. an image only an in-cluster deploy uses)
#   --import-cached  build the named images (if any), then import every cached archive (no push)
#   --push-cached    push every cached archive of PUSH_GROUPS to the registry (no build, no import)
#   groups: base (pause busybox minio registry coredns), project (porter atc-porter-runtime),
#           extra (postgres: for deploy/postgres; git-server: git http-backend in a pod for
#           bench-pipelines; not needed by cluster-up), all
#   group resources: resource-mock resource-time resource-git resource-registry-image (the resource types)
#   PORTER_IMAGES_GO_DIR=dir builds the go: sources from that module instead of the repo.
set -euo pipefail
. "$(dirname "$0")/cluster-lib.sh"

# ---------------------------------------------------------------- the image table
# One line per image:  image GROUP NAME REFERENCE [mkimage flags] SOURCE...
# A SOURCE is SRC:/DST (a file or a directory tree), go:PKG:/DST (a static binary
# of the project built from PKG, a package path relative to the module),
# tool:NAME:/DST (hack/tools/NAME, built static), or busybox:/ (a busybox userland
# with its applet links and a minimal /etc).
define_images() {
  image base    pause   "$PAUSE_IMAGE"                     -entrypoint '["/pause"]' tool:pause:/pause
  image base    busybox docker.io/library/busybox:latest   -cmd '["sh"]'            busybox:/
  image base    minio   porter.local/minio:dev             -entrypoint '["/minio"]' -env HOME=/tmp "$TOOLS_BIN/minio:/minio"
  image base    registry porter.local/registry:dev          -entrypoint '["/registry"]' -cmd '["serve","/etc/distribution/config.yml"]' "$TOOLS_BIN/registry:/registry"
  image base    coredns porter.local/coredns:dev           -entrypoint '["/coredns"]' "$TOOLS_BIN/coredns:/coredns"
  image project porter  porter.local/porter:dev            -entrypoint '["/usr/local/bin/porter"]' go:./cmd/porter:/usr/local/bin/porter
  image project atc-porter-runtime porter.local/atc-porter-runtime:dev -entrypoint '["/usr/local/bin/atc-porter-runtime"]' go:./cmd/atc-porter-runtime:/usr/local/bin/atc-porter-runtime
  # Resource types: one static binary (cmd/resource) with /opt/resource/{check,in,out}
  # linking to it; the image's env names the type. No shell, no git binary, but for
  # mock: as Concourse's, a mock with mirror_self is a task's image, and tasks
  # run a shell (busybox here).
  local rt userland
  for rt in mock time git registry-image; do
    userland=()
    [ "$rt" != mock ] || userland=(busybox:/)
    image resources "resource-$rt" "porter.local/resource-$rt:dev" -env "PORTER_RESOURCE_TYPE=$rt" -env "PORTER_RESOURCE_IMAGE=porter.local/resource-$rt:dev" \
      "${userland[@]}" go:./cmd/resource:/opt/resource/resource "$REPO_ROOT/cmd/resource/links:/opt/resource" "$CA_CERTS:/etc/ssl/certs/ca-certificates.crt"
  done
  # git's own http-backend in a pod (bench-pipelines' push → build figures):
  # Debian's git, the commands a push runs, their libraries, and
  # test/testenv/gitserver/gitserverd serving it and being its post-receive hook.
  # shellcheck disable=SC2046 # one SRC:/DST word per file
  image extra   git-server porter.local/git-server:dev -entrypoint '["/usr/local/bin/gitserverd"]' -user 65534:65534 \
    go:./test/testenv/gitserver/gitserverd:/usr/local/bin/gitserverd $(git_server_image_files)
  # shellcheck disable=SC2046 # one SRC:/DST word per file
  image extra   postgres porter.local/postgres:dev -entrypoint '["/usr/local/bin/postgres-entrypoint"]' -user 999:999 -env TZ=UTC \
    busybox:/ $(postgres_image_files) "$REPO_ROOT/deploy/postgres/image/rootfs:/"
}

# postgres_image_files: SRC:/DST words for Debian's PostgreSQL server at its own
# paths: the binaries the entrypoint runs, the server's modules (without the JIT,
# whose LLVM is large and optional), its share dir, the UTC zone, and every shared
# library they load (ldd) with the dynamic loader.
postgres_image_files() {
  local lib=/usr/lib/postgresql/$POSTGRES_MAJOR/lib elf files=() f
  files=("$POSTGRES_BIN/postgres" "$POSTGRES_BIN/initdb" "$POSTGRES_BIN/pg_isready")
  for f in "$lib"/*.so; do
    case $f in */llvmjit*) ;; *) files+=("$f") ;; esac
  done
  for f in "${files[@]}"; do echo "$f:$f"; done
  echo "/usr/share/postgresql/$POSTGRES_MAJOR:/usr/share/postgresql/$POSTGRES_MAJOR"
  echo "/usr/share/zoneinfo/Etc/UTC:/usr/share/zoneinfo/Etc/UTC"
  echo "/usr/share/zoneinfo/Etc/UTC:/usr/share/zoneinfo/UTC"
  # Libraries at the path the loader resolved, from the real file behind any link.
  for elf in "${files[@]}"; do ldd "$elf"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}' |
    sort -u | while read -r f; do echo "$(readlink -f "$f"):$f"; done
}

# git_server_image_files: SRC:/DST words for Debian's git at its own paths:
# git (every builtin a push runs: receive-pack, index-pack, unpack-objects)
# and http-backend, with the libraries they load and the dynamic loader.
git_server_image_files() {
  local core=/usr/lib/git-core f
  for f in "$core/git" "$core/git-http-backend"; do echo "$f:$f"; done
  for f in "$core/git" "$core/git-http-backend"; do ldd "$f"; done |
    awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}' |
    sort -u | while read -r f; do echo "$(readlink -f "$f"):$f"; done
}

IMAGE_NAMES=()
declare -A IMAGE_GROUP IMAGE_REF IMAGE_ARGS
image() {
  local group=$1 name=$2 ref=$3; shift 3
  IMAGE_NAMES+=("$name")
  IMAGE_GROUP[$name]=$group
  IMAGE_REF[$name]=$ref
  # The remaining words are kept NUL-free and quoted, so flags with JSON survive.
  IMAGE_ARGS[$name]=$(printf '%q ' "$@")
}

GO_DIR=${PORTER_IMAGES_GO_DIR:-$REPO_ROOT}
# The host's CA bundle, for resources that speak https (git, registry-image).
CA_CERTS=${PORTER_CA_CERTS:-/etc/ssl/certs/ca-certificates.crt}
# The project's binaries go where `make build` puts them, built the same way:
# `make demo` runs both, and go build does not link again a binary that is up
# to date (each link of atc-porter-runtime, 100 MB, is seconds of CPU). Built
# from another module, they go to the cache.
if [ -n "${PORTER_IMAGES_GO_DIR:-}" ]; then GO_BIN_DIR=$IMAGE_CACHE/bin; else GO_BIN_DIR=$REPO_ROOT/bin; fi
BUSYBOX_ROOTFS=$IMAGE_CACHE/rootfs/busybox

# build_go_binaries PKG...: one `go build` for every package, so they compile in
# parallel. The flags are those of `make build`, so both share Go's build cache.
build_go_binaries() {
  [ $# -gt 0 ] || return 0
  mkdir -p "$GO_BIN_DIR"
  (cd "$GO_DIR" && CGO_ENABLED=0 go build -trimpath -ldflags "$(porter_ldflags)" -o "$GO_BIN_DIR/" "$@")
}

# prepare_busybox_rootfs: a busybox userland from Debian's busybox-static, rebuilt
# only when that binary changes.
prepare_busybox_rootfs() {
  local bb=/bin/busybox stamp sum
  # The layout version is part of the stamp, so changing the layout rebuilds the tree.
  sum="layout-2 $(sha256sum "$bb" | cut -d' ' -f1)"
  stamp=$BUSYBOX_ROOTFS.sha256
  [ -d "$BUSYBOX_ROOTFS" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$sum" ] && return 0
  rm -rf "$BUSYBOX_ROOTFS"
  mkdir -p "$BUSYBOX_ROOTFS"/{bin,sbin,usr/bin,usr/sbin,etc,root}
  cp "$bb" "$BUSYBOX_ROOTFS/bin/busybox"
  local applet
  for applet in $("$bb" --list-full); do
    [ "$applet" = bin/busybox ] && continue
    # Absolute links, resolved inside the container. (Relative ones computed with
    # realpath would follow the host's merged-/usr /bin -> usr/bin link and break.)
    ln -sf /bin/busybox "$BUSYBOX_ROOTFS/$applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$BUSYBOX_ROOTFS/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\n' >"$BUSYBOX_ROOTFS/etc/group"
  echo "$sum" >"$stamp"
}

# build_image NAME: writes $IMAGE_CACHE/NAME.tar (+ .digest). The Go binaries and
# the busybox tree must already be there.
build_image() {
  local name=$1 arg args=() pkg
  eval "local raw=(${IMAGE_ARGS[$name]})"
  # shellcheck disable=SC2154 # raw is set by the eval above
  for arg in "${raw[@]}"; do
    case $arg in
      go:*) pkg=${arg#go:}; pkg=${pkg%%:*}; args+=("$GO_BIN_DIR/$(basename "$pkg"):${arg##*:}") ;;
      tool:*) pkg=${arg#tool:}; pkg=${pkg%%:*}; args+=("$(go_tool "$pkg"):${arg##*:}") ;;
      busybox:*) args+=("$BUSYBOX_ROOTFS:${arg#busybox:}") ;;
      *) args+=("$arg") ;;
    esac
  done
  # mkimage reads every byte to compute the digest (the MinIO binary alone is over
  # 100 MB); skip it when no input changed since the archive was written.
  local inputs stamp=$IMAGE_CACHE/$name.inputs
  inputs=$({
    printf '%s\n' "${IMAGE_REF[$name]}" "${args[@]}"
    for arg in "${args[@]}"; do
      case $arg in /*:/*) find "${arg%:*}" -printf '%P %s %T@ %m %l\n' ;; esac
    done
  } | sha256sum)
  if [ -f "$IMAGE_CACHE/$name.tar.digest" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$inputs" ]; then
    return 0
  fi
  "$MKIMAGE" -ref "${IMAGE_REF[$name]}" -o "$IMAGE_CACHE/$name.tar" "${args[@]}" >/dev/null
  echo "$inputs" >"$stamp"
}

# import_image NAME: imports the archive unless containerd already has that digest.
import_image() {
  local name=$1 ref=${IMAGE_REF[$1]} want have
  want=$(cat "$IMAGE_CACHE/$name.tar.digest")
  have=$(cluster_ctr images ls "name==$ref" | awk 'NR>1{print $3}')
  if [ "$have" = "$want" ]; then
    log "image $ref: unchanged (${want:7:12})"
    return 0
  fi
  cluster_ctr images import "$IMAGE_CACHE/$name.tar" >/dev/null
  have=$(cluster_ctr images ls "name==$ref" | awk 'NR>1{print $3}')
  [ "$have" = "$want" ] || { log "image $ref: import did not produce $want (containerd has '${have}')"; return 1; }
  log "image $ref: imported ${want:7:12}"
}

# Groups whose images go to the registry: what step pods and resource types run.
PUSH_GROUPS="base resources project"

# registry_ref REF: REF in the cluster's registry at its push address (pods
# pull it as $REGISTRY_ADDR/...), its domain (a first component with a dot or
# a colon, or localhost) dropped.
registry_ref() {
  local ref=$1 first=${1%%/*}
  if [ "$first" != "$ref" ] && { [[ $first == *[.:]* ]] || [ "$first" = localhost ]; }; then
    ref=${ref#*/}
  fi
  echo "$REGISTRY_PUSH_ADDR/$ref"
}

# push_cached: pushes every cached archive of PUSH_GROUPS in one ocipush run,
# which skips what the registry already has. Without a registry, says so and
# succeeds: the archives are still imported into containerd.
push_cached() {
  if ! registry_ready; then
    log "images: no registry answers at $REGISTRY_PUSH_ADDR and $REGISTRY_ADDR; not pushing (cluster-up starts it)"
    return 0
  fi
  local name pairs=() ocipush
  for name in "${IMAGE_NAMES[@]}"; do
    [[ " $PUSH_GROUPS " == *" ${IMAGE_GROUP[$name]} "* ]] || continue
    [ -f "$IMAGE_CACHE/$name.tar.digest" ] || continue
    pairs+=("$IMAGE_CACHE/$name.tar=$(registry_ref "${IMAGE_REF[$name]}")")
  done
  [ ${#pairs[@]} -gt 0 ] || return 0
  ocipush=$(go_tool ocipush)
  "$ocipush" "${pairs[@]}" >&2
}

# import_cached: imports every archive in the cache (cluster-up uses this).
import_cached() {
  local name
  for name in "${IMAGE_NAMES[@]}"; do
    [ -f "$IMAGE_CACHE/$name.tar.digest" ] && import_image "$name"
  done
  return 0
}

main() {
  local do_import=1 do_push=1 import_all=0 push_only=0 want=() name sel
  while [ $# -gt 0 ]; do
    case $1 in
      --no-import) do_import=0 ;;
      --no-push) do_push=0 ;;
      --import-cached) import_all=1 ;;
      --push-cached) push_only=1 ;;
      -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; return 0 ;;
      *) want+=("$1") ;;
    esac
    shift
  done
  define_images
  if [ $push_only = 1 ]; then
    timed "images: push to $REGISTRY_PUSH_ADDR" push_cached
    return
  fi
  if [ $import_all = 1 ] && [ ${#want[@]} -eq 0 ]; then
    import_cached
    return
  fi
  [ ${#want[@]} -gt 0 ] || want=(all)

  local selected=()
  for sel in "${want[@]}"; do
    local found=0
    for name in "${IMAGE_NAMES[@]}"; do
      if [ "$sel" = all ] || [ "$sel" = "${IMAGE_GROUP[$name]}" ] || [ "$sel" = "$name" ]; then
        [[ " ${selected[*]} " == *" $name "* ]] || selected+=("$name")
        found=1
      fi
    done
    [ $found = 1 ] || { log "images: unknown image or group '$sel'"; return 2; }
  done

  mkdir -p "$IMAGE_CACHE"
  MKIMAGE=$(go_tool mkimage)
  local pkgs=() arg need_busybox=0
  for name in "${selected[@]}"; do
    eval "local raw=(${IMAGE_ARGS[$name]})"
    for arg in "${raw[@]}"; do
      case $arg in
        go:*) arg=${arg#go:}; pkgs+=("${arg%%:*}") ;;
        busybox:*) need_busybox=1 ;;
      esac
    done
  done
  timed "images: go build (${#pkgs[@]} binaries)" build_go_binaries "${pkgs[@]}"
  [ $need_busybox = 0 ] || prepare_busybox_rootfs
  for name in "${selected[@]}"; do
    build_image "$name"
  done
  log "images built in $IMAGE_CACHE: ${selected[*]}"

  if [ $do_import = 0 ]; then return 0; fi
  if ! containerd_running; then
    log "images: the cluster is not running; cluster-up imports the cached images"
    return 0
  fi
  if [ $import_all = 1 ]; then
    import_cached
    return
  fi
  for name in "${selected[@]}"; do
    import_image "$name"
  done
  [ $do_push = 0 ] || timed "images: push to $REGISTRY_PUSH_ADDR" push_cached
}

main "$@"
