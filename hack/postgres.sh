#!/usr/bin/env bash
# A real PostgreSQL on this machine for development, tests and the demo: Debian's
# postgresql-$POSTGRES_MAJOR, run as the unprivileged postgres user (PostgreSQL
# refuses root), listening on 127.0.0.1:$POSTGRES_PORT only, password (SCRAM)
# authentication for the superuser "porter". The password is generated at initdb
# and kept in $POSTGRES_STATE; the admin DSN is written to $POSTGRES_ENV_FILE as
# PORTER_POSTGRES_DSN.
#
# The data is thrown away like the cluster's: fsync is off.
#
# usage: hack/postgres.sh up|start|stop|down|env
#   up, start  initdb if needed and start; when already up, only a health check
#   stop       stop (fast shutdown) and keep the data: a later start finds it again
#   down       stop and delete the data, password and env file
#   env        print the env file (KEY=VALUE lines)
#   PORTER_POSTGRES_PORT  the port (default 15432)
set -euo pipefail
. "$(dirname "$0")/cluster-lib.sh"

DATA=$POSTGRES_STATE/data
PASSWORD_FILE=$POSTGRES_STATE/password
PID_FILE=$POSTGRES_RUN/postgres.pid
PG_USER=postgres
SYS_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

die() {
  log "postgres: $*"
  exit 1
}

postgres_pid() {
  local pid
  pid=$(cat "$PID_FILE" 2>/dev/null) || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

ready() { "$POSTGRES_BIN/pg_isready" -q -h 127.0.0.1 -p "$POSTGRES_PORT" -t 1; }

# "${AS_POSTGRES[@]}" CMD...: runs CMD as the postgres user with a clean
# environment. setsid, setpriv and env all exec, so a background job's $! is CMD.
AS_POSTGRES=(setpriv --reuid="$PG_USER" --regid="$PG_USER" --init-groups
  env -i PATH="$SYS_PATH" HOME="$POSTGRES_STATE" LANG=C.UTF-8)

init_data() {
  rm -rf "$DATA"
  mkdir -p "$POSTGRES_STATE"
  chmod 755 "$POSTGRES_STATE"
  local password
  password=$(openssl rand -hex 24)
  (umask 077 && echo "$password" >"$PASSWORD_FILE")
  install -d -m 700 -o "$PG_USER" -g "$PG_USER" "$DATA"
  # The password never goes on a command line: initdb reads it from a file only
  # the postgres user can read, removed right after. --no-sync: disposable data.
  local pwfile=$POSTGRES_STATE/initdb.pw rc=0
  (umask 077 && echo "$password" >"$pwfile")
  chown "$PG_USER:" "$pwfile"
  "${AS_POSTGRES[@]}" "$POSTGRES_BIN/initdb" -D "$DATA" --username=porter --pwfile="$pwfile" \
    --auth=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 --no-sync \
    >"$POSTGRES_STATE/initdb.log" 2>&1 || rc=$?
  rm -f "$pwfile"
  [ $rc = 0 ] || { cat "$POSTGRES_STATE/initdb.log" >&2; die "initdb failed"; }
  # Loopback TCP only, password required; no Unix socket at all.
  cat >"$DATA/pg_hba.conf" <<HBA
# TYPE  DATABASE  USER  ADDRESS       METHOD
host    all       all   127.0.0.1/32  scram-sha-256
HBA
  cat >>"$DATA/postgresql.conf" <<CONF
# hack/postgres.sh
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
password_encryption = 'scram-sha-256'
# Disposable data: durability buys nothing and costs test time.
fsync = off
synchronous_commit = off
full_page_writes = off
# Every test package opens pools on its own databases in parallel.
max_connections = 300
logging_collector = off
log_min_messages = warning
CONF
  write_env "$password"
}

write_env() {
  (umask 077 && printf '%s\n' \
    "PORTER_POSTGRES_DSN=postgres://porter:$1@127.0.0.1:$POSTGRES_PORT/postgres?sslmode=disable" \
    >"$POSTGRES_ENV_FILE")
}

start() {
  if postgres_pid >/dev/null; then
    ready || die "running (pid $(postgres_pid)) but not accepting connections on 127.0.0.1:$POSTGRES_PORT (log: $POSTGRES_LOG)"
    [ -f "$POSTGRES_ENV_FILE" ] || die "$POSTGRES_ENV_FILE is missing; hack/postgres.sh down, then up"
    return 0
  fi
  [ -x "$POSTGRES_BIN/postgres" ] || die "$POSTGRES_BIN/postgres is missing (Debian package postgresql-$POSTGRES_MAJOR)"
  [ "$(id -u)" = 0 ] || die "must run as root (it starts PostgreSQL as the $PG_USER user)"
  id "$PG_USER" >/dev/null 2>&1 || die "no $PG_USER user (the Debian package creates it)"
  if ss -Hltn "sport = :$POSTGRES_PORT" | grep -q .; then
    die "port $POSTGRES_PORT is already in use: $(ss -Hltnp "sport = :$POSTGRES_PORT" | head -1)"
  fi
  # A data dir without its password is useless: start over.
  if [ ! -f "$DATA/PG_VERSION" ] || [ ! -s "$PASSWORD_FILE" ]; then
    init_data
  fi
  # The port may have changed since initdb.
  write_env "$(cat "$PASSWORD_FILE")"
  mkdir -p "$POSTGRES_RUN" "$(dirname "$POSTGRES_LOG")"
  # A postmaster.pid left by a killed server would stop the next one: its PID is
  # known to be gone (postgres_pid failed above).
  rm -f "$DATA/postmaster.pid"
  setsid "${AS_POSTGRES[@]}" "$POSTGRES_BIN/postgres" -D "$DATA" -p "$POSTGRES_PORT" \
    </dev/null >>"$POSTGRES_LOG" 2>&1 &
  echo $! >"$PID_FILE"
  local deadline=$(($(date +%s) + 30))
  until ready; do
    if ! postgres_pid >/dev/null; then
      tail -n 20 "$POSTGRES_LOG" >&2
      die "PostgreSQL exited during start-up (log: $POSTGRES_LOG)"
    fi
    [ "$(date +%s)" -lt $deadline ] || die "PostgreSQL not ready after 30s (log: $POSTGRES_LOG)"
    sleep 0.1
  done
  log "postgres: up on 127.0.0.1:$POSTGRES_PORT (pid $(postgres_pid)); DSN in $POSTGRES_ENV_FILE"
}

stop() {
  local pid
  if ! pid=$(postgres_pid); then
    rm -f "$PID_FILE"
    return 0
  fi
  # SIGINT is PostgreSQL's fast shutdown: clients are disconnected, data is kept.
  kill -INT "$pid"
  local deadline=$(($(date +%s) + 20))
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$(date +%s)" -ge $deadline ]; then
      log "postgres: pid $pid ignored the fast shutdown for 20s; SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.1
  done
  rm -f "$PID_FILE"
  log "postgres: stopped (pid $pid)"
}

case ${1:-} in
  up | start) start ;;
  stop) stop ;;
  down)
    stop
    rm -rf "$POSTGRES_STATE" "$POSTGRES_RUN"
    ;;
  env)
    [ -f "$POSTGRES_ENV_FILE" ] || die "$POSTGRES_ENV_FILE is missing: hack/postgres.sh up"
    cat "$POSTGRES_ENV_FILE"
    ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2
    exit 2
    ;;
esac
