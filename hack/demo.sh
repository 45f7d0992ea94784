#!/usr/bin/env bash
# `make demo`: from nothing to a real build on the local cluster with MinIO.
# Builds what is missing, brings the cluster up, starts the ATC runtime on the
# host (left running for you, PID in $ATC_RUN/atc.pid) and runs the examples.
# `make demo-down` stops the ATC and the cluster.
#
# usage: hack/demo.sh [up|down]
set -euo pipefail
. "$(dirname "$0")/cluster-lib.sh"

ATC_RUN=/run/porter-atc
ATC_STATE=/var/lib/porter-atc
ATC_LOG=/var/log/porter-atc.log
ATC_URL=http://127.0.0.1:8080
DEMO_NAMESPACE=porter-demo
ATC=$REPO_ROOT/bin/atc-porter-runtime
# Like Concourse's quickstart: a local user who owns team main. Demo only:
# real installs set their own users (serve --add-local-user).
DEMO_USER=test
DEMO_PASSWORD=test

# find_fly: Concourse's own fly when there is one ($FLY, ../shared/tools/fly,
# fly on PATH), else Porter's CLI, which takes the same commands and flags.
find_fly() {
  local f
  for f in "${FLY:-}" "$REPO_ROOT/../shared/tools/fly" "$(command -v fly 2>/dev/null)"; do
    [ -n "$f" ] && [ -x "$f" ] && { echo "$f"; return; }
  done
  echo "$ATC"
}

die() {
  log "demo: $*"
  exit 1
}

atc_running() {
  local pid
  pid=$(cat "$ATC_RUN/atc.pid" 2>/dev/null) || return 1
  kill -0 "$pid" 2>/dev/null && curl -fsS "$ATC_URL/healthz" >/dev/null 2>&1
}

start_atc() {
  # shellcheck disable=SC1090
  . "$CLUSTER_STATE/cluster.env"
  # The base resource types run from the cluster's registry by digest, so
  # every pod gets the images `make images` just pushed.
  local types=() name digest
  for name in registry-image git time mock; do
    digest=$(curl -fsSI --noproxy '*' -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
      -H 'Accept: application/vnd.oci.image.index.v1+json' \
      "http://$PORTER_CLUSTER_REGISTRY/v2/resource-$name/manifests/dev" |
      tr -d '\r' | awk 'tolower($1) == "docker-content-digest:" {print $2}') ||
      die "resource type image resource-$name:dev is not in the registry at $PORTER_CLUSTER_REGISTRY (make images)"
    types+=(--base-resource-type "$name=$PORTER_CLUSTER_REGISTRY/resource-$name@$digest")
  done
  # A running ATC is kept only if it runs this binary with these resource
  # type images: after a rebuild (make demo again), it would serve old code.
  local want
  want=$({ sha256sum "$ATC"; printf '%s\n' "${types[@]}"; } | sha256sum | cut -d' ' -f1)
  if atc_running; then
    if [ "$want" = "$(cat "$ATC_RUN/atc.fingerprint" 2>/dev/null)" ]; then
      log "ATC runtime already running (pid $(cat "$ATC_RUN/atc.pid"))"
      return 0
    fi
    log "ATC runtime (pid $(cat "$ATC_RUN/atc.pid")) runs an older build: restarting it"
    stop_atc
  fi
  # The Pod Security labels of deploy/atc's namespace: baseline enforced, so
  # a privileged step is refused here twice over (its worker does not allow
  # privileged steps either; docs/step-pod-security.md).
  "$TOOLS_BIN/kubectl" --kubeconfig "$ADMIN_KUBECONFIG" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: $DEMO_NAMESPACE
  labels:
    pod-security.kubernetes.io/enforce: baseline
    pod-security.kubernetes.io/enforce-version: latest
    pod-security.kubernetes.io/warn: restricted
    pod-security.kubernetes.io/warn-version: latest
    pod-security.kubernetes.io/audit: restricted
    pod-security.kubernetes.io/audit-version: latest
EOF
  mkdir -p "$ATC_RUN" "$ATC_STATE"
  # shellcheck disable=SC1090 # PORTER_POSTGRES_DSN, written by hack/postgres.sh (cluster-up)
  . "$POSTGRES_ENV_FILE"
  # registry-image resolves Docker Hub's repositories ("busybox") in the
  # cluster's registry, from which containerd pulls them as its docker.io
  # mirror (Concourse's --base-resource-type-defaults).
  printf 'registry-image:\n  registry_mirror: {host: "%s"}\n  insecure: true\n' "$PORTER_CLUSTER_REGISTRY" \
    >"$ATC_STATE/base-resource-type-defaults.yml"
  PORTER_POSTGRES_DSN=$PORTER_POSTGRES_DSN \
  PORTER_BLOBSTORE_ENDPOINT=$PORTER_CLUSTER_MINIO_ENDPOINT \
  PORTER_BLOBSTORE_BUCKET=$PORTER_CLUSTER_MINIO_BUCKET \
  PORTER_BLOBSTORE_REGION=$PORTER_CLUSTER_MINIO_REGION \
  PORTER_BLOBSTORE_ACCESS_KEY=$PORTER_CLUSTER_MINIO_ACCESS_KEY \
  PORTER_BLOBSTORE_SECRET_KEY=$PORTER_CLUSTER_MINIO_SECRET_KEY \
    setsid "$ATC" serve \
      --kubeconfig "$ADMIN_KUBECONFIG" --namespace "$DEMO_NAMESPACE" --worker local \
      --grpc-listen "$NODE_IP:7777" --http-listen 127.0.0.1:8080 --state-dir "$ATC_STATE" \
      --porter-image porter.local/porter:dev --dns-policy Default --keep-alive 10m \
      --add-local-user "$DEMO_USER:$DEMO_PASSWORD" --main-team-local-user "$DEMO_USER" \
      --base-resource-type-defaults "$ATC_STATE/base-resource-type-defaults.yml" "${types[@]}" \
      >>"$ATC_LOG" 2>&1 </dev/null &
  echo $! >"$ATC_RUN/atc.pid"
  echo "$want" >"$ATC_RUN/atc.fingerprint"
  for _ in $(seq 100); do
    atc_running && { log "ATC runtime up (pid $(cat "$ATC_RUN/atc.pid"), log $ATC_LOG)"; return 0; }
    kill -0 "$(cat "$ATC_RUN/atc.pid")" 2>/dev/null || break
    sleep 0.1
  done
  tail -20 "$ATC_LOG" >&2
  die "the ATC runtime did not start"
}

stop_atc() {
  local pid
  pid=$(cat "$ATC_RUN/atc.pid" 2>/dev/null) || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$ATC_RUN/atc.pid"
  log "ATC runtime stopped"
}

# web_current: the committed UI bundle was built from web/ as it is (the hash
# web/build.mjs writes, and webui's test checks, of the same files).
web_current() {
  local want
  want=$(cd "$REPO_ROOT/web" && { printf '%s\n' package.json package-lock.json build.mjs; find src -type f; } |
    LC_ALL=C sort | while read -r f; do printf '%s\n%s\n' "$f" "$(sha256sum <"$f" | cut -d' ' -f1)"; done |
    sha256sum | cut -d' ' -f1)
  [ "$want" = "$(cat "$REPO_ROOT/pkg/atc/webui/dist/sources.sha256" 2>/dev/null)" ]
}

case ${1:-up} in
  up)
    # The cluster's Debian packages (cluster-up checks them again) download and
    # install while the tools compile: the one waits on the network, the other
    # on the CPU.
    APT_PACKAGES=$CLUSTER_APT_PACKAGES timed "apt (in the background)" ensure_apt &
    apt_pid=$!
    # So do the modules of the project's commands and hack/tools (a failure
    # here is not one: go build fetches again and says why).
    (cd "$REPO_ROOT" && timed "project modules (in the background)" go list -deps ./cmd/... ./hack/tools/... >/dev/null) &
    mods_pid=$!
    # Only the cluster's tools: Vault and Dex are for `make test`.
    timed "tools (Kubernetes, etcd, MinIO, ...)" "$HACK_DIR/build-tools.sh" cluster
    # The UI's bundle is committed; with node at hand, build it from web/ afresh
    # when web/ changed since.
    if command -v node >/dev/null && ! web_current; then timed "web UI" "$HACK_DIR/web.sh"; fi
    wait "$apt_pid" || die "installing the cluster's Debian packages failed"
    # The cluster starts while Porter's commands compile: it mostly waits on
    # its components coming up, the build on the CPU.
    timed "cluster up (in the background)" "$HACK_DIR/cluster-up.sh" &
    cluster_pid=$!
    wait "$mods_pid" || true
    timed "porter binaries" make -C "$REPO_ROOT" --no-print-directory build
    wait "$cluster_pid" || die "the cluster did not come up (logs: $CLUSTER_LOGS)"
    # The step image (porter) and the resource types; the ATC runs on this host,
    # so its image (deploy/atc's) is not built.
    timed "images" "$HACK_DIR/images.sh" porter resources
    timed "ATC runtime" start_atc
    cd "$REPO_ROOT"
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
    FLY_BIN=$(find_fly)
    fly_name=$(basename "$FLY_BIN")
    [ "$fly_name" = atc-porter-runtime ] || fly_name=fly
    # A home of its own, so the demo's login does not touch your ~/.flyrc.
    export HOME=$ATC_STATE/home
    mkdir -p "$HOME"
    show() { echo; echo "\$ $fly_name $*"; "$FLY_BIN" "$@"; }
    show -t porter login -c "$ATC_URL" -u "$DEMO_USER" -p "$DEMO_PASSWORD"
    show -t porter execute -c examples/hello-world.yml
    show -t porter execute -c examples/make-a-file.yml -o "files=$out/files"
    show -t porter execute -c examples/consume-the-file.yml -i "files=$out/files"
    show -t porter builds
    if [ "$fly_name" = fly ]; then
      show -t porter set-pipeline -n -p hello -c examples/pipeline.yml
      show -t porter unpause-pipeline -p hello
      show -t porter trigger-job -j hello/test -w
      # `ship` follows `test` by itself: wait for it, then show its build.
      for _ in $(seq 60); do
        "$FLY_BIN" -t porter builds -j hello/ship | grep -q succeeded && break
        sleep 1
      done
      show -t porter watch -j hello/ship
      show -t porter jobs -p hello
      show -t porter resource-versions -r hello/source
    fi
    echo
    echo "The ATC runtime keeps running at $ATC_URL (log: $ATC_LOG); 'make demo-down' stops it and the cluster."
    echo "Log in like Concourse's quickstart (demo user $DEMO_USER, password $DEMO_PASSWORD, owner of team main):"
    echo
    echo "  $fly_name -t porter login -c $ATC_URL -u $DEMO_USER -p $DEMO_PASSWORD"
    echo
    echo "The dashboard: $ATC_URL/"
    ;;
  down)
    stop_atc
    "$HACK_DIR/cluster-down.sh"
    ;;
  *) die "usage: hack/demo.sh [up|down]" ;;
esac
