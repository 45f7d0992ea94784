#!/usr/bin/env bash
# Stops the local cluster that hack/cluster-up.sh started and removes everything it
# left on the host: processes (by recorded PID only, never by name), containers,
# mounts, network namespaces, veths, the bridge, the lo alias, iptables chains,
# cgroups and all state, and PostgreSQL (hack/postgres.sh down). Logs stay in
# $CLUSTER_LOGS for post-mortems.
#
# Idempotent: when nothing is left it does nothing and says so.
#
# usage: hack/cluster-down.sh
set -uo pipefail # no -e: one failed cleanup step must not skip the others
. "$(dirname "$0")/cluster-lib.sh"

T_START=$(date +%s%N)
elapsed() { awk -v a="$T_START" -v b="$(date +%s%N)" 'BEGIN{printf "%.1f", (b-a)/1e9}'; }

# Chains the kubelet (KUBE-*) and, on clusters made before it was dropped, the
# CNI firewall plugin (CNI-*) create. Nothing else on these machines (dockerd
# included) uses these prefixes.
CHAIN_PREFIXES='KUBE-|CNI-'

# our_shims: PIDs of runc shims serving our containerd, by the socket their
# command line names (they outlive it, and their state file may be gone).
our_shims() { pgrep -f -- "containerd-shim-runc-v2 .*-address $CONTAINERD_SOCK\$"; }

leftovers() {
  [ -d "$CLUSTER_RUN" ] || [ -d "$CLUSTER_STATE" ] && return 0
  ip -4 addr show dev lo | grep -q " $NODE_IP/32" && return 0
  ip link show "$BRIDGE" >/dev/null 2>&1 && return 0
  iptables -S FORWARD 2>/dev/null | grep -qE 'porter-cluster-(isolation|pods)' && return 0
  local h
  for h in /sys/fs/cgroup/*/kubepods; do [ -d "$h" ] && return 0; done
  our_shims >/dev/null && return 0
  return 1
}

# stop_components TIMEOUT NAME...: SIGTERM the recorded PIDs together, SIGKILL
# whatever is still there after TIMEOUT seconds.
stop_components() {
  local timeout=$1 name pid
  shift
  local -A pids=()
  for name in "$@"; do
    if pid=$(component_pid "$name"); then
      kill -TERM "$pid" 2>/dev/null
      pids[$name]=$pid
    fi
    rm -f "$CLUSTER_RUN/$name.pid"
  done
  local deadline=$(($(date +%s%N) + timeout * 1000000000)) left
  while :; do
    left=0
    for name in "${!pids[@]}"; do kill -0 "${pids[$name]}" 2>/dev/null && left=1; done
    [ $left = 0 ] || [ "$(date +%s%N)" -gt $deadline ] && break
    sleep 0.1
  done
  for name in "${!pids[@]}"; do
    if kill -0 "${pids[$name]}" 2>/dev/null; then
      log "cluster-down: $name (pid ${pids[$name]}) ignored SIGTERM for ${timeout}s; SIGKILL"
      kill -KILL "${pids[$name]}" 2>/dev/null
    fi
    log "cluster-down: stopped $name (pid ${pids[$name]})"
  done
}

# Removing the sandboxes through CRI makes containerd stop the containers and run
# CNI DEL, which deletes veths, IPAM leases, firewall rules and the netns.
remove_pods() {
  containerd_running || return 0
  local crictl=$TOOLS_BIN/crictl-lite
  [ -x "$crictl" ] || crictl=$(go_tool crictl-lite) || return 0
  "$crictl" -endpoint "unix://$CONTAINERD_SOCK" -timeout 60s rmp 2>>"$CLUSTER_LOGS/cluster-down.log" ||
    log "cluster-down: removing pod sandboxes failed; cleaning up by hand (see $CLUSTER_LOGS/cluster-down.log)"
}

# Processes that outlived containerd: its shims (found by the socket they
# name, since a shim's state file may be gone after containerd restarted under
# running pods), then anything still in the kubelet's cgroups (only our kubelet
# creates kubepods).
kill_orphans() {
  local f pid
  for pid in $(our_shims); do
    log "cluster-down: killing leftover shim $pid"
    kill -KILL "$pid" 2>/dev/null
  done
  for f in $(find /sys/fs/cgroup/pids/kubepods -name cgroup.procs 2>/dev/null); do
    for pid in $(cat "$f"); do
      log "cluster-down: killing leftover container process $pid"
      kill -KILL "$pid" 2>/dev/null
    done
  done
}

unmount_all() {
  local m
  # Deepest first: overlay rootfs, shm, tmpfs token volumes, netns bind mounts.
  findmnt -rn -o TARGET | awk -v a="$CLUSTER_STATE/" -v b="$CLUSTER_RUN/" 'index($0, a)==1 || index($0, b)==1' |
    sort -r | while read -r m; do
      umount "$m" 2>/dev/null || umount -l "$m"
    done
  # Pod network namespaces that CNI DEL did not remove. Only CRI runtimes create
  # cni-* here; dockerd keeps its own in /var/run/docker/netns.
  for m in /var/run/netns/cni-*; do
    [ -e "$m" ] || continue
    umount "$m" 2>/dev/null
    rm -f "$m"
  done
}

remove_cgroups() {
  local h
  for h in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/unified/kubepods; do
    [ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
  return 0
}

remove_network() {
  ip link show "$BRIDGE" >/dev/null 2>&1 && ip link del "$BRIDGE"
  ip -4 addr show dev lo | grep -q " $NODE_IP/32" && ip addr del "$NODE_IP/32" dev lo
  local rule ipt table chain
  remove_forward_rules
  for ipt in iptables ip6tables; do
    for table in filter nat mangle; do
      # Jumps into our chains first, then the chains themselves.
      "$ipt" -t "$table" -S 2>/dev/null | grep -E "^-A .* -j ($CHAIN_PREFIXES)" | while read -r rule; do
        eval "$ipt -t $table ${rule/-A/-D}" 2>/dev/null
      done
      for chain in $("$ipt" -t "$table" -S 2>/dev/null | awk -v re="^($CHAIN_PREFIXES)" '$1=="-N" && $2 ~ re {print $2}'); do
        "$ipt" -t "$table" -F "$chain" 2>/dev/null
      done
      for chain in $("$ipt" -t "$table" -S 2>/dev/null | awk -v re="^($CHAIN_PREFIXES)" '$1=="-N" && $2 ~ re {print $2}'); do
        "$ipt" -t "$table" -X "$chain" 2>/dev/null
      done
    done
  done
  return 0
}

# The kubelet writes a few things outside --root-dir.
remove_kubelet_strays() {
  # /var/log/containers: symlinks into our pod log dir.
  find /var/log/containers -maxdepth 1 -type l -lname "$CLUSTER_STATE/*" -delete 2>/dev/null
  rmdir /var/log/containers 2>/dev/null
  # The device-plugin directory is hard-coded to /var/lib/kubelet/device-plugins.
  rm -f /var/lib/kubelet/device-plugins/kubelet.sock /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint
  rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet 2>/dev/null
  # containerd (2.4 as 1.6) puts shim sockets in the hard-coded /run/containerd/s, which
  # dockerd's containerd shares: remove it only when nothing is left in it.
  rmdir /run/containerd/s /run/containerd 2>/dev/null
  return 0
}

main() {
  # PostgreSQL keeps its own state dirs, so it is stopped (and its data deleted)
  # whether or not the cluster left anything.
  "$REPO_ROOT/hack/postgres.sh" down
  if ! leftovers; then
    log "cluster-down: nothing to do, the cluster is not running"
    return 0
  fi
  mkdir -p "$CLUSTER_LOGS"
  : >"$CLUSTER_LOGS/cluster-down.log"
  # Nothing may create or restart pods while they are being removed.
  timed "stop kubelet and controllers" stop_components 10 kube-proxy apiserver-proxy kubelet kube-scheduler kube-controller-manager
  timed "remove pod sandboxes" remove_pods
  # The data is thrown away, so etcd need not outlive the apiserver.
  # All state is thrown away below, so a component that dawdles is killed after a
  # few seconds (the apiserver has been seen to hang in shutdown for 15s+).
  timed "stop containerd, apiserver" stop_components 5 containerd kube-apiserver
  timed "stop etcd" stop_components 5 etcd
  kill_orphans
  timed "mounts, netns, cgroups" eval 'unmount_all; remove_cgroups'
  timed "network, iptables" remove_network
  remove_kubelet_strays
  rm -rf "$CLUSTER_STATE" "$CLUSTER_RUN"
  log "cluster-down: done in $(elapsed)s (logs kept in $CLUSTER_LOGS)"
}

main "$@"
