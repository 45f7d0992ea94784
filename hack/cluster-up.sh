#!/usr/bin/env bash
# Brings up a real single-node Kubernetes cluster plus MinIO on this machine, from
# binaries built by hack/build-tools.sh and Debian packages only:
#
#   etcd -> kube-apiserver -> kube-controller-manager + kube-scheduler
#   containerd (a private instance, CRI on) -> kubelet (cgroupfs, CNI bridge)
#   MinIO as a host-network pod on the node IP, bucket "porter"
#   an image registry (CNCF distribution) as a host-network pod, plain HTTP:
#   read-only on the node IP (pods and containerd pull there), read-write on
#   127.0.0.1 (the cached images are pushed there; pods cannot reach it)
#   PostgreSQL on 127.0.0.1:$POSTGRES_PORT (hack/postgres.sh; on the host, not a pod)
#   kube-proxy (iptables mode, a host process like the kubelet) and socat
#   forwarding $NODE_IP:6443 to the apiserver: ClusterIPs route, pods reach the API
#   CoreDNS (deploy/coredns) at $CLUSTER_DNS_IP, the kubelet's clusterDNS
#
# Everything listens on 127.0.0.1 or on the node IP (a /32 alias on lo); pods can
# reach each other and this host, nothing else. Image pulls from anywhere but the
# cluster's registry fail at once and locally: images come from hack/images.sh.
#
# Idempotent: when the cluster is already up this only checks its health, imports
# and pushes images that changed, and brings what changed in this script to the
# running cluster without a teardown: a missing registry, kube-proxy,
# apiserver proxy or CoreDNS is started, containerd is restarted (its
# containers keep running) if its settings changed, and so is the kubelet (its
# pods keep running) if its config changed.
# A half-running cluster is torn down and restarted.
# Every process is recorded by PID in $CLUSTER_RUN; hack/cluster-down.sh stops them.
#
# usage: hack/cluster-up.sh
#        hack/cluster-up.sh restart kube-apiserver|kubelet|minio
#          (a crash of one part, as `make soak` injects it: SIGKILL, or the
#          MinIO pod deleted, then started again and waited for)
set -euo pipefail
. "$(dirname "$0")/cluster-lib.sh"

SYS_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
PKI=$CLUSTER_STATE/pki
T_START=$(date +%s%N)

die() {
  log "cluster-up: $* (component logs: $CLUSTER_LOGS; hack/cluster-down.sh cleans up)"
  exit 1
}

elapsed() { awk -v a="$T_START" -v b="$(date +%s%N)" 'BEGIN{printf "%.1f", (b-a)/1e9}'; }

# wait_until TIMEOUT WHAT CMD...: retries CMD every 0.2s until it succeeds.
wait_until() {
  local timeout=$1 what=$2 deadline
  shift 2
  deadline=$(($(date +%s) + timeout))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || die "timed out after ${timeout}s waiting for $what"
    sleep 0.2
  done
}

# start_component NAME CMD...: runs CMD in its own session with a clean
# environment, output to $CLUSTER_LOGS/NAME.log, PID to $CLUSTER_RUN/NAME.pid.
# setsid and env both exec, so the recorded PID is the component itself.
start_component() {
  local name=$1
  shift
  setsid env -i PATH="$SYS_PATH" HOME="$HOME" "$@" </dev/null >"$CLUSTER_LOGS/$name.log" 2>&1 &
  echo $! >"$CLUSTER_RUN/$name.pid"
}

require_alive() {
  component_pid "$1" >/dev/null && return 0
  tail -n 30 "$CLUSTER_LOGS/$1.log" >&2 || true
  die "$1 exited"
}

# ---------------------------------------------------------------- health of a running cluster
node_ready() {
  [ "$(cluster_kubectl get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]
}
minio_ready() { curl -fsS --noproxy '*' -o /dev/null --max-time 2 "http://$MINIO_ENDPOINT/minio/health/ready"; }
minio_on_host() {
  [ -n "$(cluster_kubectl -n "$MINIO_NAMESPACE" get deployment minio \
    -o 'jsonpath={.spec.template.spec.volumes[?(@.name=="data")].hostPath.path}' 2>/dev/null)" ]
}
# minio_bucket_exists: S3 HeadBucket, signed by curl itself.
minio_bucket_exists() {
  [ "$(curl -sS --noproxy '*' -o /dev/null -w '%{http_code}' -I --aws-sigv4 "aws:amz:us-east-1:s3" \
    --user "$(secret_value MINIO_ROOT_USER):$(secret_value MINIO_ROOT_PASSWORD)" "http://$MINIO_ENDPOINT/$MINIO_BUCKET")" = 200 ]
}

check_health() {
  local c
  for c in "${CLUSTER_COMPONENTS[@]}"; do require_alive "$c"; done
  cluster_kubectl get --raw /readyz >/dev/null || die "kube-apiserver is not ready"
  node_ready || die "node $NODE_NAME is not Ready"
  minio_ready || die "MinIO at $MINIO_ENDPOINT is not ready"
  [ -f "$MINIO_ENV_FILE" ] || die "$MINIO_ENV_FILE is missing"
}

# check_routing: kube-proxy and the apiserver proxy run and kube-proxy is
# healthy; cluster DNS answers for the kubernetes Service, through its ClusterIP
# (so this proves kube-proxy's rules as well as CoreDNS).
check_routing() {
  local c
  for c in "${ADDON_COMPONENTS[@]}"; do require_alive "$c"; done
  kube_proxy_ready || die "kube-proxy is not healthy (127.0.0.1:10256/healthz)"
  dns_ready || die "cluster DNS at $CLUSTER_DNS_IP does not resolve kubernetes.default.svc.$CLUSTER_DOMAIN"
}

# converge_running: brings a running cluster to what this script would start
# today. Each step is a no-op when nothing changed.
converge_running() {
  local b
  for b in registry kube-proxy coredns containerd containerd-shim-runc-v2; do
    [ -x "$TOOLS_BIN/$b" ] || die "$TOOLS_BIN/$b is missing: run hack/build-tools.sh"
  done
  reconcile_containerd
  [ -f "$PKI/kube-proxy.kubeconfig" ] || kube_proxy_pki
  component_pid apiserver-proxy >/dev/null || start_apiserver_proxy
  component_pid kube-proxy >/dev/null || start_kube_proxy
  reconcile_kubelet
  network_current || configure_cni
  # base: builds the registry image if it is new (cheap when the archives are current).
  timed "import changed images" "$REPO_ROOT/hack/images.sh" --import-cached base ||
    die "importing the images failed"
  registry_ready || timed "registry ready" start_registry
  # MinIO from before its data lived on the host (a restart lost every
  # object), or without its bucket: apply deploy/minio again.
  { minio_on_host && minio_bucket_exists; } || timed "MinIO ready, bucket" start_minio
  timed "push changed images" "$REPO_ROOT/hack/images.sh" --push-cached || die "pushing the images failed"
  dns_ready || timed "CoreDNS ready" start_coredns
  { grep -qxF "PORTER_CLUSTER_REGISTRY=$REGISTRY_ADDR" "$CLUSTER_STATE/cluster.env" &&
    grep -qxF "PORTER_CLUSTER_REGISTRY_PUSH=$REGISTRY_PUSH_ADDR" "$CLUSTER_STATE/cluster.env" &&
    grep -qxF "PORTER_CLUSTER_POD_SUBNET=$POD_SUBNET" "$CLUSTER_STATE/cluster.env"; } 2>/dev/null ||
    write_env_files "$(secret_value MINIO_ROOT_USER)" "$(secret_value MINIO_ROOT_PASSWORD)"
}

# ---------------------------------------------------------------- phases of a fresh start
preflight() {
  [ "$(id -u)" = 0 ] || die "must run as root"
  APT_PACKAGES=$CLUSTER_APT_PACKAGES ensure_apt
  local b
  for b in etcd containerd containerd-shim-runc-v2 kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl kube-proxy minio registry coredns; do
    [ -x "$TOOLS_BIN/$b" ] || die "$TOOLS_BIN/$b is missing: run hack/build-tools.sh"
  done
  for b in /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/bin/socat /bin/busybox; do
    [ -x "$b" ] || die "$b is missing (package containernetworking-plugins)"
  done
  # A distro etcd, another cluster or a leftover MinIO would make a confusing failure later.
  local p
  for p in $CLUSTER_PORTS; do
    if ss -Hltn "sport = :$p" | grep -q .; then
      die "port $p is already in use: $(ss -Hltnp "sport = :$p" | head -1)"
    fi
  done
  CRICTL=$(go_tool crictl-lite)
  mkdir -p "$CLUSTER_STATE" "$CLUSTER_RUN" "$CLUSTER_LOGS/previous"
  # Keep one generation of logs from the previous run for post-mortems.
  find "$CLUSTER_LOGS" -maxdepth 1 -name '*.log' -exec mv -f {} "$CLUSTER_LOGS/previous/" \;
}

prepare_host() {
  ip -4 addr show dev lo | grep -q " $NODE_IP/32" || ip addr add "$NODE_IP/32" dev lo
  # Pods reach this host through the bridge; bridged pod<->pod traffic goes through
  # iptables so the FORWARD rules (configure_cni) apply. br_netfilter is built in here.
  sysctl -qw net.ipv4.ip_forward=1
  sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
  mkdir -p /var/run/netns
}

# make_cert NAME SUBJECT EXTENDED-KEY-USAGE [SUBJECT-ALT-NAMES]: a leaf signed by the CA.
make_cert() {
  openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -subj "$2" \
    -keyout "$PKI/$1.key" -out "$PKI/$1.csr" 2>/dev/null
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$3"
    [ -z "${4:-}" ] || echo "subjectAltName=$4"
  } >"$PKI/$1.ext"
  openssl x509 -req -sha256 -days 365 -in "$PKI/$1.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
    -CAcreateserial -extfile "$PKI/$1.ext" -out "$PKI/$1.crt" 2>/dev/null
  rm -f "$PKI/$1.csr" "$PKI/$1.ext"
}

# write_kubeconfig FILE USER CERT: a kubeconfig with the credentials embedded.
write_kubeconfig() {
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: porter
  cluster:
    server: $APISERVER_URL
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$3.crt")
    client-key-data: $(base64 -w0 "$PKI/$3.key")
contexts:
- name: porter
  context: {cluster: porter, user: $2, namespace: default}
current-context: porter
EOF
  chmod 600 "$1"
}

# kube_proxy_pki: kube-proxy's identity; the RBAC bootstrap policy binds
# system:node-proxier to this user name. Separate so that a cluster from before
# kube-proxy gets it on the next cluster-up.
kube_proxy_pki() {
  make_cert kube-proxy "/CN=system:kube-proxy" clientAuth
  write_kubeconfig "$PKI/kube-proxy.kubeconfig" kube-proxy kube-proxy
}

# EC P-256 everywhere: generating the whole PKI takes about half a second.
generate_pki() {
  rm -rf "$PKI"
  mkdir -p "$PKI"
  chmod 700 "$PKI"
  openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -sha256 -days 3650 \
    -subj "/CN=porter-cluster-ca" -keyout "$PKI/ca.key" -out "$PKI/ca.crt" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
  make_cert apiserver "/CN=kube-apiserver" serverAuth \
    "IP:127.0.0.1,IP:$NODE_IP,IP:${SERVICE_CIDR%.0/*}.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  # The apiserver's client identity towards the kubelet (logs, exec).
  make_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
  make_cert admin "/O=system:masters/CN=porter-admin" clientAuth
  # The RBAC bootstrap policy binds these exact user names.
  make_cert controller-manager "/CN=system:kube-controller-manager" clientAuth
  make_cert scheduler "/CN=system:kube-scheduler" clientAuth
  # Node authorizer and NodeRestriction recognise the kubelet by this identity.
  make_cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
  kube_proxy_pki
  openssl genpkey -algorithm ec -pkeyopt ec_paramgen_curve:prime256v1 -out "$PKI/service-account.key" 2>/dev/null
  openssl pkey -in "$PKI/service-account.key" -pubout -out "$PKI/service-account.pub" 2>/dev/null
  write_kubeconfig "$ADMIN_KUBECONFIG" porter-admin admin
  write_kubeconfig "$PKI/controller-manager.kubeconfig" controller-manager controller-manager
  write_kubeconfig "$PKI/scheduler.kubeconfig" scheduler scheduler
  write_kubeconfig "$PKI/kubelet.kubeconfig" kubelet kubelet
}

start_etcd() {
  mkdir -p "$CLUSTER_STATE/etcd"
  chmod 700 "$CLUSTER_STATE/etcd"
  # Plain HTTP on loopback only (nothing else can reach it), peer URL included so
  # etcd binds no other address. The data is thrown away on cluster-down, so fsync
  # buys nothing.
  start_component etcd "$TOOLS_BIN/etcd" --name porter --data-dir "$CLUSTER_STATE/etcd" --unsafe-no-fsync \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster porter=http://127.0.0.1:2380 --initial-cluster-state new \
    --logger zap --log-outputs stderr --log-level warn
}

# A containerd of our own, apart from the one dockerd runs: own root, state, socket
# and runc root, so neither sees the other's containers or images.
CONTAINERD_ROOT=$CLUSTER_STATE/containerd
# The proxy is a closed loopback port: a pull of a missing image fails at once,
# on this machine, instead of resolving and dialling a registry. The cluster's
# registry, on the node IP, is the one exception.
CONTAINERD_ENV=(HTTP_PROXY=http://127.0.0.1:1 HTTPS_PROXY=http://127.0.0.1:1 NO_PROXY="$NODE_IP")

# Why each setting (containerd 2.4, config version 4):
#  imports = []            the host's /etc/containerd/conf.d is not ours to read.
#  disabled_plugins        no tracing exporter; no NRI plugins (its socket is
#                          host-wide and dockerd's containerd may own it).
#  pinned_images.sandbox   the local pause image; registry.k8s.io is unreachable.
#  use_local_image_pull    pulls through the CRI plugin's own resolver, which
#                          reads config_path (hosts.toml) below.
#  config_path             per-registry hosts.toml files: the cluster's registry is
#                          plain HTTP (containerd would try HTTPS).
#  restrict_oom_score_adj  root here lacks CAP_SYS_RESOURCE, so runc cannot set the
#                          -998 the kubelet asks for the pause container ("can't get
#                          final child's PID from pipe"); clamp to containerd's own score.
#  runtime_path            the shim built with this containerd, not the one on PATH
#                          (Debian's, for dockerd's containerd 1.6).
#  SystemdCgroup = false   no systemd; matches the kubelet's cgroupfs driver.
#  Root (runc)             runc's default /run/containerd/runc/k8s.io could be shared
#                          with another containerd.
#  bin_dirs                Debian installs the CNI plugins in /usr/lib/cni.
#  stream_server_address   exec/attach/port-forward served on loopback only.
containerd_config() {
  local root=$CONTAINERD_ROOT state=$CLUSTER_RUN/containerd
  cat <<EOF
version = 4
root = "$root"
state = "$state"
imports = []
disabled_plugins = ["io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing", "io.containerd.nri.v1.nri"]
[plugins."io.containerd.server.v1.grpc"]
  address = "$CONTAINERD_SOCK"
[plugins."io.containerd.server.v1.ttrpc"]
  address = "$CONTAINERD_SOCK.ttrpc"
[plugins."io.containerd.server.v1.debug"]
  address = ""
[plugins."io.containerd.server.v1.metrics"]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$root/opt"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  use_local_image_pull = true
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "$PAUSE_IMAGE"
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "$CONTAINERD_HOSTS_DIR"
[plugins."io.containerd.cri.v1.runtime"]
  enable_selinux = false
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      runtime_path = "$TOOLS_BIN/containerd-shim-runc-v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$CLUSTER_RUN/runc"
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$CLUSTER_STATE/cni/net.d"
    max_conf_num = 1
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
EOF
}

# containerd reads hosts.toml at every pull: it can change without a restart.
write_containerd_hosts() {
  local dir=$CONTAINERD_HOSTS_DIR/$REGISTRY_ADDR
  mkdir -p "$dir"
  cat >"$dir/hosts.toml.tmp" <<EOF
# The local cluster's registry (deploy/registry): plain HTTP on the node IP.
server = "http://$REGISTRY_ADDR"

[host."http://$REGISTRY_ADDR"]
  capabilities = ["pull", "resolve"]
EOF
  mv "$dir/hosts.toml.tmp" "$dir/hosts.toml"
  # Docker Hub is unreachable here; the registry mirrors it (images.sh pushes
  # docker.io/library/busybox as library/busybox), so a task's
  # `busybox@sha256:...` pulls from it like any cluster with a pull-through
  # mirror would.
  dir=$CONTAINERD_HOSTS_DIR/docker.io
  mkdir -p "$dir"
  cat >"$dir/hosts.toml.tmp" <<EOF
server = "https://registry-1.docker.io"

[host."http://$REGISTRY_ADDR"]
  capabilities = ["pull", "resolve"]
EOF
  mv "$dir/hosts.toml.tmp" "$dir/hosts.toml"
}

# containerd_settings: a digest of everything containerd reads only at start,
# its version included.
containerd_settings() {
  { containerd_config; printf '%s\n' "${CONTAINERD_ENV[@]}"; cat "$TOOLS_BIN/.containerd.version" 2>/dev/null; } | sha256sum | cut -d' ' -f1
}

start_containerd() {
  mkdir -p "$CONTAINERD_ROOT" "$CLUSTER_RUN/containerd" "$CLUSTER_STATE/cni/net.d" "$CLUSTER_STATE/cni/ipam"
  containerd_config >"$CONTAINERD_ROOT/config.toml"
  write_containerd_hosts
  containerd_settings >"$CLUSTER_RUN/containerd.settings"
  start_component containerd "${CONTAINERD_ENV[@]}" "$TOOLS_BIN/containerd" --config "$CONTAINERD_ROOT/config.toml" --log-level warn
}

# reconcile_containerd: on a running cluster, restarts containerd if it was
# started with other settings (an older cluster-up). Its containers keep running
# (their shims outlive it) and the kubelet reconnects; this takes about a second.
reconcile_containerd() {
  write_containerd_hosts
  [ "$(cat "$CLUSTER_RUN/containerd.settings" 2>/dev/null)" = "$(containerd_settings)" ] && return 0
  log "cluster-up: containerd's settings changed; restarting containerd (containers keep running)"
  local pid deadline
  pid=$(component_pid containerd) || die "containerd is not running"
  kill -TERM "$pid"
  deadline=$(($(date +%s) + 15))
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "cluster-up: containerd ignored SIGTERM for 15s; SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    sleep 0.1
  done
  mkdir -p "$CLUSTER_LOGS/previous"
  mv -f "$CLUSTER_LOGS/containerd.log" "$CLUSTER_LOGS/previous/containerd.log" 2>/dev/null || true
  start_containerd
  wait_until 30 "containerd's socket" cluster_ctr version
  require_alive containerd
  cluster_kubectl wait --for=condition=Ready "node/$NODE_NAME" --timeout=60s >/dev/null ||
    die "node $NODE_NAME is not Ready after restarting containerd"
}

start_apiserver() {
  # --bind-address 127.0.0.1: only this host reaches the API.
  # --advertise-address: the "kubernetes" Service endpoint; must not be loopback.
  # --kubelet-preferred-address-types InternalIP: the node IP, where the kubelet listens.
  # Node,RBAC + NodeRestriction: the kubelet gets node permissions only, as with kubeadm.
  start_component kube-apiserver "$TOOLS_BIN/kube-apiserver" \
    --etcd-servers=http://127.0.0.1:2379 \
    --bind-address=127.0.0.1 --secure-port=6443 --advertise-address="$NODE_IP" \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --client-ca-file="$PKI/ca.crt" \
    --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/service-account.pub" \
    --service-account-signing-key-file="$PKI/service-account.key" \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --allow-privileged=true --profiling=false --event-ttl=1h
}

# network_current: the CNI config and the FORWARD rules are configure_cni's: the
# isolation rule first, then the accepts, and no firewall plugin.
network_current() {
  [ "$(iptables -S FORWARD | sed -n '2,4p' | grep -c -E 'porter-cluster-(isolation|pods)')" = 3 ] &&
    iptables -S FORWARD | sed -n 2p | grep -q porter-cluster-isolation &&
    ! grep -q '"firewall"' "$CLUSTER_STATE/cni/net.d/10-porter.conflist"
}

# bridge: one veth per pod on $BRIDGE; ipMasq off, since pod traffic has nowhere
#   to go but this host. No firewall plugin: it jumps to its per-pod rules from
#   the top of FORWARD, ahead of the isolation rule, so pods bypassed it (a pod
#   reached a Docker container on docker0). Two static rules accept the pod
#   subnet's bridged traffic instead, which dockerd's DROP policy on FORWARD would
#   refuse.
configure_cni() {
  cat >"$CLUSTER_STATE/cni/net.d/10-porter.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "porter",
  "plugins": [
    {
      "type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {
        "type": "host-local", "dataDir": "$CLUSTER_STATE/cni/ipam",
        "ranges": [[{"subnet": "$POD_SUBNET", "gateway": "$POD_GATEWAY"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
EOF
  # Pods may reach each other and this host; anything they try to route elsewhere
  # (eth0, docker0) is rejected, first thing in FORWARD. Re-made on every run, so
  # that nothing inserted since (an older cluster's firewall plugin jump) stays
  # ahead of it. cluster-down removes the rules by their comments.
  remove_forward_rules
  iptables -I FORWARD 1 -s "$POD_SUBNET" ! -o "$BRIDGE" -m comment --comment porter-cluster-isolation -j REJECT
  iptables -I FORWARD 2 -s "$POD_SUBNET" -m comment --comment porter-cluster-pods -j ACCEPT
  iptables -I FORWARD 3 -d "$POD_SUBNET" -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment porter-cluster-pods -j ACCEPT
}

# Builds the base images if they are not cached yet (a no-op otherwise) and imports
# every cached image. Runs in the background while the control plane starts: the
# kubelet needs the pause image only once a pod is scheduled.
import_images() {
  local start rc=0
  start=$(date +%s%N)
  wait_until 30 "containerd's socket" cluster_ctr version
  require_alive containerd
  "$REPO_ROOT/hack/images.sh" --import-cached base || rc=$?
  log "$(printf '%-30s %7.1fs' "images into containerd" "$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN{print (b-a)/1e9}')")"
  return $rc
}

start_controllers() {
  # --leader-elect=false: one instance, no lease to wait for.
  # --kube-api-qps/burst: the defaults throttle start-up, when every controller gets
  #   its service account and token; the default ServiceAccount then appears ~4s later.
  # --root-ca-file: published as the kube-root-ca.crt ConfigMap that token volumes need.
  # --flex-volume-plugin-dir: the default creates /usr/libexec/kubernetes/... on the host.
  start_component kube-controller-manager "$TOOLS_BIN/kube-controller-manager" \
    --kubeconfig="$PKI/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$PKI/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$PKI/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
    --kube-api-qps=200 --kube-api-burst=400 \
    --root-ca-file="$PKI/ca.crt" --service-account-private-key-file="$PKI/service-account.key" \
    --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" --profiling=false \
    --flex-volume-plugin-dir="$CLUSTER_STATE/controller-manager/volume-plugins"
  start_component kube-scheduler "$TOOLS_BIN/kube-scheduler" \
    --kubeconfig="$PKI/scheduler.kubeconfig" \
    --authentication-kubeconfig="$PKI/scheduler.kubeconfig" \
    --authorization-kubeconfig="$PKI/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --leader-elect=false --profiling=false
}

KUBELET_DIR=$CLUSTER_STATE/kubelet

kubelet_config() {
  local dir=$KUBELET_DIR
  cat <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The kubelet API (logs, exec) on the node IP only; health on loopback.
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
# No systemd here; containerd uses cgroupfs too.
cgroupDriver: cgroupfs
# This host is cgroup v1 (hybrid); kubelets since 1.35 refuse that unless told.
failCgroupV1: false
failSwapOn: false
# Root lacks CAP_SYS_RESOURCE: the kubelet can neither lower its oom_score_adj
# (default -999) nor raise RLIMIT_NOFILE past the hard limit (default 1000000).
oomScoreAdj: 0
maxOpenFiles: $(ulimit -Hn)
# dnsPolicy Default pods get no nameserver (nothing resolves names off this
# host); ClusterFirst pods get CoreDNS (deploy/coredns).
resolvConf: ""
clusterDNS: [$CLUSTER_DNS_IP]
clusterDomain: $CLUSTER_DOMAIN
podLogsDir: $CLUSTER_STATE/pod-logs
serializeImagePulls: false
# Images cannot be pulled back, so never garbage-collect them.
# Images are imported by name (porter.local/...) and also pulled from the
# local registry under another; once the kubelet has pulled one, it would make
# every other name of it prove its pull credentials (KubeletEnsureSecretPulledImages),
# which a pull policy of Never cannot: a single-user cluster trusts its images.
imagePullCredentialsVerificationPolicy: NeverVerify
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# Do not evict CI pods because a shared machine's disk or memory is fairly full.
evictionHard: {memory.available: "100Mi", nodefs.available: "2%", imagefs.available: "2%", nodefs.inodesFree: "2%"}
# An emptyDir past its sizeLimit is evicted once the kubelet measures it:
# every 10 s instead of every minute, so a step filling its volume fails soon.
volumeStatsAggPeriod: 10s
# The default /usr/libexec/kubernetes/... would litter the host.
volumePluginDir: $dir/volume-plugins
maxPods: 110
EOF
}

start_kubelet() {
  local dir=$KUBELET_DIR
  mkdir -p "$dir" "$CLUSTER_STATE/pod-logs"
  kubelet_config >"$dir/config.yaml"
  # --root-dir/--cert-dir keep volumes and the kubelet's serving cert under our state.
  # --hostname-override matches the name in the kubelet's client certificate.
  start_component kubelet "$TOOLS_BIN/kubelet" \
    --config="$dir/config.yaml" --kubeconfig="$PKI/kubelet.kubeconfig" \
    --root-dir="$dir" --cert-dir="$dir/pki" \
    --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" --v=1
}

# reconcile_kubelet: on a running cluster, restarts the kubelet if its config
# changed (an older cluster-up). Pods keep running: their containers belong to
# containerd, and the new kubelet adopts them; it takes a few seconds.
reconcile_kubelet() {
  [ "$(kubelet_config)" = "$(cat "$KUBELET_DIR/config.yaml" 2>/dev/null)" ] && return 0
  log "cluster-up: the kubelet's config changed; restarting the kubelet (pods keep running)"
  local pid deadline
  pid=$(component_pid kubelet) || die "the kubelet is not running"
  kill -TERM "$pid"
  deadline=$(($(date +%s) + 15))
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "cluster-up: the kubelet ignored SIGTERM for 15s; SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    sleep 0.1
  done
  mkdir -p "$CLUSTER_LOGS/previous"
  mv -f "$CLUSTER_LOGS/kubelet.log" "$CLUSTER_LOGS/previous/kubelet.log" 2>/dev/null || true
  start_kubelet
  wait_until 30 "the kubelet's healthz" curl -fsS --noproxy '*' http://127.0.0.1:10248/healthz
  require_alive kubelet
  cluster_kubectl wait --for=condition=Ready "node/$NODE_NAME" --timeout=60s >/dev/null ||
    die "node $NODE_NAME is not Ready after restarting the kubelet"
}

# ---------------------------------------------------------------- Service routing and DNS
# socat, one process per connection: the apiserver keeps its loopback-only
# bind (and the host's kubeconfigs their 127.0.0.1 URL), while pods reach it at
# the "kubernetes" Service endpoint the apiserver advertises ($NODE_IP:6443;
# its certificate names $NODE_IP and the Service IP).
start_apiserver_proxy() {
  start_component apiserver-proxy socat "TCP-LISTEN:6443,bind=$NODE_IP,reuseaddr,fork" TCP:127.0.0.1:6443
}

# Why each setting:
#  mode iptables           the backend the pod subnet's FORWARD rules use too;
#                          cluster-down removes its KUBE- chains.
#  clusterCIDR             traffic from outside the pod subnet to a ClusterIP is
#                          masqueraded, so replies come back through this host.
#  nodePortAddresses       NodePorts on the node IP only, never on eth0.
#  localhostNodePorts      off: it would set route_localnet on the host.
#  conntrack 0s/0          leave the host's conntrack sysctls alone (root here
#                          cannot set them all, and other things share them).
#  health/metrics          loopback only.
kube_proxy_config() {
  cat <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $PKI/kube-proxy.kubeconfig
hostnameOverride: $NODE_NAME
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
mode: iptables
clusterCIDR: $POD_SUBNET
nodePortAddresses: ["$NODE_IP/32"]
iptables:
  localhostNodePorts: false
  masqueradeAll: false
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
}

start_kube_proxy() {
  mkdir -p "$CLUSTER_STATE/kube-proxy"
  kube_proxy_config >"$CLUSTER_STATE/kube-proxy/config.yaml"
  start_component kube-proxy "$TOOLS_BIN/kube-proxy" --config="$CLUSTER_STATE/kube-proxy/config.yaml" --v=1
}

kube_proxy_ready() { curl -fs --noproxy '*' -o /dev/null --max-time 2 http://127.0.0.1:10256/healthz; }

# dns_ready: CoreDNS answers through the kube-dns ClusterIP, so this proves
# kube-proxy's rules too (busybox-static's nslookup: no other DNS client is
# sure to be installed).
dns_ready() {
  busybox nslookup "kubernetes.default.svc.$CLUSTER_DOMAIN" "$CLUSTER_DNS_IP" 2>/dev/null |
    grep -q "^Address.*[: ]${SERVICE_CIDR%.0/*}\.1\$"
}

start_coredns() {
  wait_until 60 "kube-proxy's healthz" kube_proxy_ready
  cluster_kubectl apply -k "$REPO_ROOT/deploy/coredns" >/dev/null
  cluster_kubectl -n "$COREDNS_NAMESPACE" rollout status deployment/coredns --timeout=120s >/dev/null ||
    die "CoreDNS did not become ready (kubectl -n $COREDNS_NAMESPACE describe pod -l app.kubernetes.io/name=coredns)"
  wait_until 30 "cluster DNS at $CLUSTER_DNS_IP" dns_ready
}

wait_apiserver() {
  wait_until 60 "kube-apiserver /readyz" cluster_kubectl get --raw /readyz
  require_alive kube-apiserver
}

no_taints() { [ -z "$(cluster_kubectl get node "$NODE_NAME" -o 'jsonpath={.spec.taints}')" ]; }

wait_node() {
  wait_until 60 "node $NODE_NAME to register" cluster_kubectl get node "$NODE_NAME"
  cluster_kubectl wait --for=condition=Ready "node/$NODE_NAME" --timeout=120s >/dev/null ||
    die "node $NODE_NAME did not become Ready"
  # Pods need the default ServiceAccount (admission) and kube-root-ca.crt (token
  # volume); the not-ready taint goes once the node controller has seen Ready.
  wait_until 60 "the default ServiceAccount" cluster_kubectl -n default get serviceaccount default
  wait_until 60 "the kube-root-ca.crt ConfigMap" cluster_kubectl -n default get configmap kube-root-ca.crt
  wait_until 60 "the node's taints to clear" no_taints
  local c
  for c in "${CLUSTER_COMPONENTS[@]}"; do require_alive "$c"; done
}

secret_value() {
  cluster_kubectl -n "$MINIO_NAMESPACE" get secret minio-credentials -o "jsonpath={.data.$1}" | base64 -d
}

start_minio() {
  "$REPO_ROOT/hack/credentials.sh"
  cluster_kubectl apply -k "$REPO_ROOT/deploy/minio" >/dev/null
  cluster_kubectl -n "$MINIO_NAMESPACE" rollout status deployment/minio --timeout=120s >/dev/null ||
    die "MinIO did not become ready (kubectl -n $MINIO_NAMESPACE describe pod -l app.kubernetes.io/name=minio)"
  wait_until 30 "MinIO at $MINIO_ENDPOINT" minio_ready
  # The credentials' one source is the Secret in deploy/minio.
  local access secret status
  access=$(secret_value MINIO_ROOT_USER)
  secret=$(secret_value MINIO_ROOT_PASSWORD)
  # S3 CreateBucket, signed by curl itself; 409 means it exists already.
  status=$(curl -sS --noproxy '*' -o /dev/null -w '%{http_code}' -X PUT \
    --aws-sigv4 "aws:amz:us-east-1:s3" --user "$access:$secret" "http://$MINIO_ENDPOINT/$MINIO_BUCKET")
  case $status in 200 | 409) ;; *) die "creating bucket $MINIO_BUCKET failed: HTTP $status" ;; esac
  write_env_files "$access" "$secret"
}

# registry_kustomization: an overlay of deploy/registry that sets the port, in
# the state dir (kustomize takes the base by relative path).
registry_kustomization() {
  local dir=$CLUSTER_STATE/registry-kustomize
  mkdir -p "$dir"
  cat >"$dir/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- $(realpath --relative-to="$dir" "$REPO_ROOT/deploy/registry")
configMapGenerator:
- name: registry-settings
  namespace: $REGISTRY_NAMESPACE
  behavior: merge
  literals:
  - REGISTRY_PORT=$REGISTRY_PORT
EOF
  echo "$dir"
}

start_registry() {
  cluster_kubectl apply -k "$(registry_kustomization)" >/dev/null
  cluster_kubectl -n "$REGISTRY_NAMESPACE" rollout status deployment/registry --timeout=120s >/dev/null ||
    die "the registry did not start (kubectl -n $REGISTRY_NAMESPACE describe pod -l app.kubernetes.io/name=registry)"
  wait_until 30 "the registry at $REGISTRY_ADDR" registry_ready
}

# Two files for other tools: minio.env (MinIO only) and cluster.env (everything).
# Both are shell- and dotenv-compatible KEY=VALUE lines.
write_env_files() {
  local minio=(
    "PORTER_CLUSTER_MINIO_ENDPOINT=$MINIO_ENDPOINT"
    "PORTER_CLUSTER_MINIO_POD_ENDPOINT=$MINIO_ENDPOINT"
    "PORTER_CLUSTER_MINIO_ACCESS_KEY=$1"
    "PORTER_CLUSTER_MINIO_SECRET_KEY=$2"
    "PORTER_CLUSTER_MINIO_BUCKET=$MINIO_BUCKET"
    "PORTER_CLUSTER_MINIO_REGION=us-east-1"
    "PORTER_CLUSTER_MINIO_SECURE=false"
  )
  (umask 077 && printf '%s\n' "${minio[@]}" >"$MINIO_ENV_FILE")
  (umask 077 && printf '%s\n' "PORTER_KUBECONFIG=$ADMIN_KUBECONFIG" "PORTER_CLUSTER_NODE_IP=$NODE_IP" "PORTER_CLUSTER_POD_SUBNET=$POD_SUBNET" \
    "PORTER_CLUSTER_REGISTRY=$REGISTRY_ADDR" "PORTER_CLUSTER_REGISTRY_PUSH=$REGISTRY_PUSH_ADDR" "${minio[@]}" >"$CLUSTER_STATE/cluster.env")
}

print_summary() {
  cat >&2 <<EOF
cluster is up ($(elapsed)s)
  kubeconfig:     export KUBECONFIG=$ADMIN_KUBECONFIG   (kubectl: $TOOLS_BIN/kubectl)
  node:           $NODE_NAME, node IP $NODE_IP, pods $POD_SUBNET on $BRIDGE
  MinIO:          http://$MINIO_ENDPOINT from the host and from pods, bucket $MINIO_BUCKET
  registry:       pull http://$REGISTRY_ADDR (read-only; pods and containerd), push http://$REGISTRY_PUSH_ADDR (this host only)
  Services:       kube-proxy (iptables); ClusterIPs in $SERVICE_CIDR route from the host and pods
  DNS:            CoreDNS at $CLUSTER_DNS_IP, domain $CLUSTER_DOMAIN (ClusterFirst pods)
  credentials:    $MINIO_ENV_FILE (all settings: $CLUSTER_STATE/cluster.env)
  PostgreSQL:     127.0.0.1:$POSTGRES_PORT, admin DSN in $POSTGRES_ENV_FILE
  logs:           $CLUSTER_LOGS
EOF
}

# restart NAME: kills one part of a running cluster the hard way and starts it
# again with this script's own settings, then waits until it is healthy.
restart() {
  local pid
  case ${1:-} in
  kube-apiserver | kubelet)
    pid=$(component_pid "$1") || die "$1 is not running"
    kill -KILL "$pid"
    wait_until 10 "$1 (pid $pid) to exit" bash -c "! kill -0 $pid 2>/dev/null"
    if [ "$1" = kubelet ]; then
      start_kubelet
      wait_until 60 "node $NODE_NAME Ready" node_ready
    else
      start_apiserver
      wait_apiserver
    fi
    ;;
  minio)
    cluster_kubectl -n "$MINIO_NAMESPACE" delete pod -l app.kubernetes.io/name=minio --wait=true >/dev/null
    cluster_kubectl -n "$MINIO_NAMESPACE" rollout status deployment/minio --timeout=120s >/dev/null ||
      die "MinIO did not come back"
    wait_until 60 "MinIO at $MINIO_ENDPOINT" minio_ready
    ;;
  *) die "restart: want kube-apiserver, kubelet or minio, not '${1:-}'" ;;
  esac
  log "restarted $1 in $(elapsed)s"
}

main() {
  if [ "${1:-}" = restart ]; then
    shift
    restart "$@"
    return
  fi
  local c alive=0 dead=0
  for c in "${CLUSTER_COMPONENTS[@]}"; do
    if component_pid "$c" >/dev/null; then alive=$((alive + 1)); else dead=$((dead + 1)); fi
  done
  if [ $dead = 0 ]; then
    timed "verify running cluster" check_health
    converge_running
    timed "verify Services and DNS" check_routing
    timed "postgres" "$REPO_ROOT/hack/postgres.sh" up
    print_summary
    return 0
  fi
  if [ $alive -gt 0 ] || [ -d "$CLUSTER_RUN" ] || [ -d "$CLUSTER_STATE" ]; then
    log "cluster-up: found a partial cluster ($alive of ${#CLUSTER_COMPONENTS[@]} components running); tearing it down first"
    "$REPO_ROOT/hack/cluster-down.sh"
  fi

  timed "preflight (apt, tools, ports)" preflight
  timed "host network" prepare_host
  timed "PKI" generate_pki
  # Start order is for speed: etcd and containerd together; the images are imported
  # and CNI configured while the apiserver initialises; controllers and kubelet
  # together; MinIO once the node is Ready and the images are in.
  start_etcd
  start_containerd
  wait_until 30 "etcd" curl -fsS --noproxy '*' http://127.0.0.1:2379/health
  require_alive etcd
  start_apiserver
  start_apiserver_proxy
  import_images &
  local images_pid=$!
  configure_cni
  # PostgreSQL needs nothing of the cluster; it starts while the apiserver does.
  timed "postgres" "$REPO_ROOT/hack/postgres.sh" up &
  local postgres_pid=$!
  timed "kube-apiserver ready" wait_apiserver
  start_controllers
  start_kubelet
  timed "node Ready, default SA" wait_node
  start_kube_proxy
  wait "$images_pid" || die "importing the images failed"
  wait "$postgres_pid" || die "starting PostgreSQL failed (hack/postgres.sh up)"
  timed "MinIO ready, bucket" start_minio
  timed "registry ready" start_registry
  timed "push images" "$REPO_ROOT/hack/images.sh" --push-cached || die "pushing the images failed"
  timed "CoreDNS ready" start_coredns
  timed "verify Services and DNS" check_routing
  print_summary
}

main "$@"
