# Settings and helpers shared by cluster-up.sh, cluster-down.sh, images.sh and
# test.sh. Source it; it defines variables and functions only.
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Where the cluster keeps things. cluster-down deletes STATE and RUN and keeps LOGS
# so a failed CI run can still be examined.
CLUSTER_STATE=/var/lib/porter-cluster
CLUSTER_RUN=/run/porter-cluster
CLUSTER_LOGS=/var/log/porter-cluster

# Files other tools read: tests, the ATC, people.
ADMIN_KUBECONFIG=$CLUSTER_STATE/admin.kubeconfig
MINIO_ENV_FILE=$CLUSTER_STATE/minio.env

# Network. The node IP is a /32 alias on lo: the kubelet refuses a loopback node IP,
# the kernel has no dummy interface, and eth0 must not be used. Pods live on their
# own bridge and cannot route anywhere but the bridge and this host.
NODE_NAME=porter-node
NODE_IP=10.245.0.1
POD_SUBNET=10.244.0.0/24
POD_GATEWAY=10.244.0.1
SERVICE_CIDR=10.96.0.0/24
# Cluster DNS (CoreDNS, deploy/coredns): the Service IP is fixed in the service
# CIDR, and the kubelet writes it into ClusterFirst pods' resolv.conf.
CLUSTER_DNS_IP=${SERVICE_CIDR%.0/*}.10
CLUSTER_DOMAIN=cluster.local
BRIDGE=porterbr0
APISERVER_URL=https://127.0.0.1:6443
# The image registry (deploy/registry, the CNCF distribution registry) is a
# host-network pod, plain HTTP, with two instances over one storage: pods and
# the host's containerd pull from a read-only one on NODE_IP (REGISTRY_ADDR);
# the push path (images.sh, tests) uses a read-write one on the host's
# loopback (REGISTRY_PUSH_ADDR), which pods cannot reach. An image pushed as
# REGISTRY_PUSH_ADDR/x is pulled as REGISTRY_ADDR/x.
# PORTER_CLUSTER_REGISTRY_PORT moves both off 5000.
REGISTRY_PORT=${PORTER_CLUSTER_REGISTRY_PORT:-5000}
REGISTRY_ADDR=$NODE_IP:$REGISTRY_PORT
REGISTRY_PUSH_ADDR=127.0.0.1:$REGISTRY_PORT
REGISTRY_NAMESPACE=porter-registry
# Ports this cluster listens on (all on 127.0.0.1 or NODE_IP); cluster-up refuses
# to start if something else already holds one of them.
CLUSTER_PORTS="2379 2380 6443 9000 $REGISTRY_PORT 10248 10249 10250 10256 10257 10259"

# MinIO runs as a host-network pod on NODE_IP, so the host and pods use one address.
MINIO_ENDPOINT=$NODE_IP:9000
MINIO_BUCKET=porter
MINIO_NAMESPACE=porter-minio

# PostgreSQL (hack/postgres.sh) runs on the host, as the postgres user, apart from
# the cluster's dirs: it can be up without the cluster, and cluster-up's check for
# a half-running cluster must not see it.
POSTGRES_BIN=/usr/lib/postgresql/$POSTGRES_MAJOR/bin
# A suite that must restart its database without disturbing the others runs
# a private server: it sets these three and PORTER_POSTGRES_PORT.
POSTGRES_STATE=${PORTER_POSTGRES_STATE:-/var/lib/porter-postgres}
POSTGRES_RUN=${PORTER_POSTGRES_RUN:-/run/porter-postgres}
POSTGRES_LOG=${PORTER_POSTGRES_LOG:-$CLUSTER_LOGS/postgres/postgres.log}
POSTGRES_PORT=${PORTER_POSTGRES_PORT:-15432}
# PORTER_POSTGRES_DSN (the admin DSN) for tests and the ATC.
POSTGRES_ENV_FILE=$POSTGRES_STATE/postgres.env

CONTAINERD_SOCK=$CLUSTER_RUN/containerd.sock
# containerd's per-registry settings (hosts.toml files), its CRI registry config_path.
CONTAINERD_HOSTS_DIR=$CLUSTER_STATE/containerd/certs.d
PAUSE_IMAGE=porter.local/pause:dev
# Built images are cached here as OCI archives; cluster-up imports them all.
IMAGE_CACHE=$PORTER_CACHE/images

# Components in start order; each one's PID is in $CLUSTER_RUN/<name>.pid.
CLUSTER_COMPONENTS=(etcd containerd kube-apiserver kube-controller-manager kube-scheduler kubelet)
# Host processes added later, for Service routing: a cluster-up of a running
# cluster that lacks them starts them instead of calling the cluster half up.
#  apiserver-proxy  socat from $NODE_IP:6443 (the "kubernetes" Service's
#                   endpoint) to the apiserver on 127.0.0.1:6443, so pods reach
#                   the API through kube-proxy while the apiserver stays on loopback
#  kube-proxy       iptables mode: ClusterIPs (and the DNS Service) route
ADDON_COMPONENTS=(apiserver-proxy kube-proxy)
COREDNS_NAMESPACE=kube-system

# ctr talks to our containerd only, in the namespace the CRI plugin uses.
cluster_ctr() { ctr -a "$CONTAINERD_SOCK" -n k8s.io "$@"; }

cluster_kubectl() { "$TOOLS_BIN/kubectl" --kubeconfig "$ADMIN_KUBECONFIG" "$@"; }

# component_pid NAME: prints the recorded PID if that process is still alive.
component_pid() {
  local pid
  pid=$(cat "$CLUSTER_RUN/$1.pid" 2>/dev/null) || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

containerd_running() { component_pid containerd >/dev/null && [ -S "$CONTAINERD_SOCK" ]; }

# registry_ready: both instances of the registry answer their API base (GET
# /v2/ is 200 without auth), and the one pods reach refuses an upload (405):
# a registry from before the read-only instance is not ready, so cluster-up
# applies deploy/registry again.
registry_ready() {
  curl -fs --noproxy '*' -o /dev/null --max-time 2 "http://$REGISTRY_ADDR/v2/" &&
    curl -fs --noproxy '*' -o /dev/null --max-time 2 "http://$REGISTRY_PUSH_ADDR/v2/" &&
    [ "$(curl -s --noproxy '*' -o /dev/null -w '%{http_code}' --max-time 2 -X POST \
      "http://$REGISTRY_ADDR/v2/porter-ready/blobs/uploads/")" = 405 ]
}

# go_tool NAME: builds hack/tools/NAME into $TOOLS_BIN (a no-op when up to date:
# go build is incremental) and prints its path.
go_tool() {
  # -buildvcs=false: the binaries (and so the pause image) stay the same across commits.
  (cd "$REPO_ROOT" && CGO_ENABLED=0 go build -trimpath -buildvcs=false -o "$TOOLS_BIN/$1" "./hack/tools/$1") || return 1
  echo "$TOOLS_BIN/$1"
}

# remove_forward_rules: removes the pod subnet's rules from FORWARD, by their
# comments (cluster-up makes them, cluster-down removes them).
remove_forward_rules() {
  local rule
  while rule=$(iptables -S FORWARD | grep -m1 -E 'porter-cluster-(isolation|pods)'); do
    eval "iptables ${rule/-A/-D}" || break
  done
}
