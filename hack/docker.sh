#!/usr/bin/env bash
# Brings up a Docker engine for the tests (testcontainers) on this machine.
#
# usage: hack/docker.sh up|down
#   up:   installs docker.io from apt if missing, starts dockerd in the background
#         unless `docker info` already works, and waits until it answers.
#   down: stops the dockerd that `up` started (by its recorded PID), nothing else.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

RUN_DIR=/run/porter
LOG_DIR=/var/log/porter
PID_FILE=$RUN_DIR/dockerd.pid
LOG_FILE=$LOG_DIR/dockerd.log

install_docker() {
  command -v dockerd >/dev/null && command -v docker >/dev/null && return 0
  log "apt: installing docker.io"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends docker.io >/dev/null 2>&1 || {
    apt-get update -qq && apt-get install -y -qq --no-install-recommends docker.io
  }
}

wait_ready() {
  local i
  for i in $(seq 1 60); do
    docker info >/dev/null 2>&1 && return 0
    if [ -f "$PID_FILE" ] && ! kill -0 "$(cat "$PID_FILE")" 2>/dev/null; then
      log "dockerd exited; last log lines:"; tail -n 20 "$LOG_FILE" >&2 || true
      return 1
    fi
    sleep 1
  done
  log "dockerd did not become ready within 60s (log: $LOG_FILE)"
  return 1
}

up() {
  install_docker
  if docker info >/dev/null 2>&1; then
    log "docker: already running"
    return 0
  fi
  mkdir -p "$RUN_DIR" "$LOG_DIR"
  log "docker: starting dockerd (log: $LOG_FILE)"
  # setsid: dockerd must outlive this script and the shell that ran it.
  setsid dockerd >>"$LOG_FILE" 2>&1 </dev/null &
  echo $! >"$PID_FILE"
  wait_ready
  log "docker: ready (pid $(cat "$PID_FILE"))"
}

down() {
  if [ ! -f "$PID_FILE" ]; then
    log "docker: no dockerd started by this script"
    return 0
  fi
  local pid
  pid=$(cat "$PID_FILE")
  # Only signal the PID if it is still a dockerd: the PID may have been reused.
  if kill -0 "$pid" 2>/dev/null && [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = dockerd ]; then
    log "docker: stopping dockerd (pid $pid)"
    kill -TERM "$pid"
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$pid" 2>/dev/null && { log "docker: dockerd $pid still running after 30s"; return 1; }
  fi
  rm -f "$PID_FILE"
}

case ${1:-} in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
