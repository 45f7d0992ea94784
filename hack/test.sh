#!/usr/bin/env bash
# What `make test` (and so CI) runs, from a fresh machine or a warm one:
#
#   apt -> tool builds -> docker up -> images -> cluster-up -> go test ./... -> teardown
#
# Each phase is timed and a summary is printed at the end. The cluster and Docker
# are torn down in an EXIT trap, also when something failed, and the exit status
# is that of the first failed phase (normally `go test`). A cluster or Docker
# engine that was already running before (a developer's) is used and left alone.
#
# Test suites find the cluster through the exported PORTER_KUBECONFIG,
# PORTER_CLUSTER_NODE_IP, PORTER_CLUSTER_MINIO_* (see docs/local-cluster.md) and
# PORTER_POSTGRES_DSN (hack/postgres.sh).
#
# usage: hack/test.sh
#   GO_TEST_FLAGS   flags for go test (default: -count=1 -timeout 60m: CI always really runs the suites)
#   GO_TEST_PKGS    packages (default: ./...)
#   PORTER_KEEP_CLUSTER=1  leave the cluster and Docker running afterwards
#   PORTER_TEST_DOCKER=0   neither start nor stop Docker (e.g. one is already in use)
#   PORTER_FUZZTIME        how long the API fuzz target runs after the tests (default 45s)
#   SOAK_DURATION          how long the soak under faults runs last (default 5m; 0 skips it)
set -euo pipefail
. "$(dirname "$0")/cluster-lib.sh"

GO_TEST_FLAGS=${GO_TEST_FLAGS:--count=1 -timeout 60m}
GO_TEST_PKGS=${GO_TEST_PKGS:-./...}

PHASES=()
declare -A PHASE_SECONDS PHASE_STATUS
T_START=$(date +%s%N)
DOCKER_STARTED=0
CLUSTER_STARTED=0

# phase NAME CMD...: runs CMD, records its time and status.
phase() {
  local name=$1 start rc=0
  shift
  PHASES+=("$name")
  log "=== $name"
  start=$(date +%s%N)
  "$@" || rc=$?
  PHASE_SECONDS[$name]=$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN{printf "%.1f", (b-a)/1e9}')
  PHASE_STATUS[$name]=$([ $rc = 0 ] && echo ok || echo "failed ($rc)")
  return $rc
}

summary() {
  local name
  printf '\n%-24s %9s  %s\n' phase seconds status >&2
  for name in "${PHASES[@]}"; do
    printf '%-24s %9s  %s\n' "$name" "${PHASE_SECONDS[$name]}" "${PHASE_STATUS[$name]}" >&2
  done
  printf '%-24s %9s\n' total "$(awk -v a="$T_START" -v b="$(date +%s%N)" 'BEGIN{printf "%.1f", (b-a)/1e9}')" >&2
}

teardown() {
  local rc=$?
  trap - EXIT INT TERM
  if [ "${PORTER_KEEP_CLUSTER:-}" = 1 ]; then
    log "PORTER_KEEP_CLUSTER=1: leaving the cluster and Docker running"
  else
    [ $CLUSTER_STARTED = 0 ] || phase "cluster-down" "$REPO_ROOT/hack/cluster-down.sh" || true
    [ $DOCKER_STARTED = 0 ] || phase "docker down" "$REPO_ROOT/hack/docker.sh" down || true
  fi
  summary
  [ $rc = 0 ] && log "test: PASS" || log "test: FAIL (exit $rc; cluster logs: $CLUSTER_LOGS)"
  exit $rc
}
trap teardown EXIT
# Turn signals into a normal exit so the trap tears down.
trap 'exit 130' INT
trap 'exit 143' TERM

docker_up() {
  # hack/docker.sh belongs to the Docker-based suites; older trees lack it.
  if [ "${PORTER_TEST_DOCKER:-1}" = 0 ]; then
    log "PORTER_TEST_DOCKER=0: not touching Docker"
    return 0
  fi
  if [ ! -x "$REPO_ROOT/hack/docker.sh" ]; then
    log "hack/docker.sh not present; skipping"
    return 0
  fi
  # A Docker engine that already answers belongs to someone else: use it, and
  # leave it running afterwards.
  if docker info >/dev/null 2>&1; then
    log "docker: already running; it will be left running"
    return 0
  fi
  DOCKER_STARTED=1
  "$REPO_ROOT/hack/docker.sh" up
}

# A cluster that is already fully up (a developer's) is reused and left running;
# otherwise this run owns it and tears it down.
cluster_up() {
  local c
  for c in "${CLUSTER_COMPONENTS[@]}"; do
    component_pid "$c" >/dev/null || CLUSTER_STARTED=1
  done
  [ $CLUSTER_STARTED = 1 ] || log "cluster: already running; it will be left running (make cluster-down for a fresh one)"
  "$REPO_ROOT/hack/cluster-up.sh"
}

# cluster_test_env: exports what the suites (and the soak) read to find the
# cluster, MinIO and PostgreSQL.
cluster_test_env() {
  set -a
  # shellcheck disable=SC1091 # written by cluster-up
  . "$CLUSTER_STATE/cluster.env" || return 1
  # PORTER_POSTGRES_DSN: the admin DSN; suites create their own databases.
  # shellcheck disable=SC1090 # written by hack/postgres.sh
  . "$POSTGRES_ENV_FILE" || return 1
  set +a
  export PORTER_CLUSTER_MINIO_ENV_FILE=$MINIO_ENV_FILE
  export PORTER_KUBECTL=$TOOLS_BIN/kubectl
}

run_go_tests() {
  # (Functions run by phase() are in an || list, where set -e is off: check by hand.)
  cluster_test_env || return 1
  # test/ui's screenshots of every page, kept after the run.
  export PORTER_UI_SCREENSHOTS=${PORTER_UI_SCREENSHOTS:-$REPO_ROOT/_out/ui-screenshots}
  # The suites record their specs' times here (test/testenv/spectimes.go).
  PORTER_SPEC_TIMES_DIR=$(mktemp -d /tmp/porter-spec-times.XXXXXX)
  export PORTER_SPEC_TIMES_DIR
  local rc=0
  # shellcheck disable=SC2086 # GO_TEST_FLAGS and GO_TEST_PKGS are word lists
  (cd "$REPO_ROOT" && go test $GO_TEST_FLAGS $GO_TEST_PKGS) || rc=$?
  spec_times "$PORTER_SPEC_TIMES_DIR"
  rm -rf "$PORTER_SPEC_TIMES_DIR"
  return $rc
}

# spec_times DIR: each suite's total and the slowest specs, so that a suite
# that grows shows where its time went.
spec_times() {
  local files=("$1"/*.tsv)
  [ -e "${files[0]}" ] || return 0
  log "spec seconds by suite (specs run one after another within a suite):"
  awk -F'\t' '{t[$3]+=$1; n[$3]++} END {for (s in t) printf "%9.1f  %4d specs  %s\n", t[s], n[s], s}' "${files[@]}" | sort -rn >&2
  log "the 15 slowest specs:"
  sort -t$'\t' -k1,1 -rn "${files[@]}" | head -15 | awk -F'\t' '{printf "%9.1f  %s  %s: %s\n", $1, $2, $3, $4}' >&2
}

phase "apt" ensure_apt
phase "tool builds" "$REPO_ROOT/hack/build-tools.sh" test
phase "docker up" docker_up
phase "images" "$REPO_ROOT/hack/images.sh" --no-import all
phase "cluster-up" cluster_up
phase "go test" run_go_tests
# Bounded fuzzing of the API (its corpus is committed under testdata/fuzz):
# random requests through the real router and middleware, fakes behind.
phase "fuzz api" bash -c "cd '$REPO_ROOT' && go test ./pkg/atc/apiserver -run '^\$' -fuzz FuzzAPI -fuzztime ${PORTER_FUZZTIME:-45s} -parallel 2"

# run_soak: `make soak` for SOAK_DURATION (default 5m here). It restarts the
# kube-apiserver, the kubelet and MinIO, so it runs alone, after the suites.
run_soak() {
  cluster_test_env || return 1
  local out=${SOAK_JSON:-$CLUSTER_LOGS/soak.json}
  (cd "$REPO_ROOT" && SOAK_DURATION=${SOAK_DURATION:-5m} go run ./test/soak -json "$out")
}
[ "${SOAK_DURATION:-5m}" = 0 ] || phase "soak" run_soak
