#!/usr/bin/env bash
# Builds the third-party binaries the local cluster and the tests need, from the Go
# module proxy only, into $TOOLS_BIN (outside the work tree, so fresh clones reuse it).
# A binary whose stamp matches its pinned version is not rebuilt: a warm run takes
# well under a second. Prints how long each build took.
#
# usage: hack/build-tools.sh [cluster | test | NAME...]
#   cluster (the default, what `make demo` builds): what the local cluster runs, i.e.
#     kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl kube-proxy
#     etcd containerd minio registry coredns
#   test (what `make test` builds): those, and what only the tests run: vault (the
#     Vault credential manager's specs) and dex ($TOOLS_BIN/dex-$DEX_VERSION, the
#     single sign-on specs)
#   NAME...: just those
set -euo pipefail
. "$(dirname "$0")/lib.sh"

K8S_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl kube-proxy)
CLUSTER_TOOLS=("${K8S_CMDS[@]}" etcd containerd minio registry coredns)
case "${1:-cluster}" in
  cluster) want=("${CLUSTER_TOOLS[@]}") ;;
  test) want=("${CLUSTER_TOOLS[@]}" vault dex) ;;
  *) want=("$@") ;;
esac
mkdir -p "$TOOLS_BIN" "$PORTER_CACHE/src"

# Every build uses the same flags so Go's build cache stays valid between runs:
# static (the binaries also go into FROM-scratch images) and trimmed paths.
export CGO_ENABLED=0
GOFLAGS_BUILD=(-trimpath -buildvcs=false)

minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
patch=${K8S_VERSION##*.}
k8s_src=$PORTER_CACHE/src/k8s-$K8S_VERSION
etcd_src=$PORTER_CACHE/src/etcd-$ETCD_VERSION
vault_src=$PORTER_CACHE/src/vault-$VAULT_VERSION

# k8s.io/kubernetes cannot be built with `go install mod@version`: its go.mod replaces the
# k8s.io/<staging> modules with ./staging paths. A wrapper module requires it and points
# every staging module at its published v0.<minor>.<patch> tag instead.
k8s_tools_go() {
  printf '//go:build tools\n\npackage tools\n\nimport (\n'
  local c
  for c in "${K8S_CMDS[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c"; done
  printf ')\n'
}

# The modules Porter's commands compile with client-go (hack/k8s-shared-modules.txt,
# written by `make generate` through internal/buildshare's test, which checks it) at Porter's
# versions: the wrapper module requires them too, so that both builds compile those
# packages to the same Go build cache entries and Porter's first build does not
# compile client-go again (about 80 s on 2 cores). A change of them rebuilds Kubernetes.
K8S_SHARED=$HACK_DIR/k8s-shared-modules.txt
k8s_stamp() {
  echo "$K8S_VERSION+$(sha256sum <"$K8S_SHARED" | cut -c1-12)"
}

k8s_shared_requires() {
  printf 'require (\n'
  awk 'NF == 2 {printf "\t%s %s\n", $1, $2}' "$K8S_SHARED"
  printf ')\n'
}

k8s_module() {
  # A module made for other shared module versions is written afresh (its
  # download is cached); one made for fewer commands (an older K8S_CMDS) lacks
  # their go.sum lines: write the imports again and tidy once.
  if [ -f "$k8s_src/go.sum" ] && [ "$(k8s_stamp)" = "$(cat "$k8s_src/.shared" 2>/dev/null)" ]; then
    [ "$(k8s_tools_go)" = "$(cat "$k8s_src/tools.go" 2>/dev/null)" ] && return 0
    k8s_tools_go >"$k8s_src/tools.go"
    (cd "$k8s_src" && go mod tidy)
    return 0
  fi
  mkdir -p "$k8s_src"
  local gomod
  gomod=$(cd "$k8s_src" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  {
    printf 'module porter.local/k8s\n\ngo 1.25\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$K8S_VERSION"
    grep -E '^\s+k8s\.io/[a-z0-9-]+ => \./staging/' "$gomod" | awk -v v="v0.$minor.$patch" '{printf "\t%s => %s %s\n", $1, $1, v}'
    printf ')\n\n'
    k8s_shared_requires
  } >"$k8s_src/go.mod"
  k8s_tools_go >"$k8s_src/tools.go"
  (cd "$k8s_src" && go mod tidy)
  k8s_stamp >"$k8s_src/.shared"
}

# etcd's server module has ../ replaces too: same trick.
etcd_module() {
  [ -f "$etcd_src/go.sum" ] && return 0
  mkdir -p "$etcd_src"
  printf 'module porter.local/etcd\n\ngo 1.25\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >"$etcd_src/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >"$etcd_src/tools.go"
  (cd "$etcd_src" && go mod tidy)
}

# Vault's go.mod replaces its api and sdk modules with ./api and ./sdk, which the
# module zip leaves out, so `go install` refuses it. A wrapper module builds a
# writable copy of it (./vault) with the published sdk its go.mod names, and repeats
# its replaces that point at other modules. That sdk changed one callback's
# signatures after the release's own ./sdk (framework.Backend.ActivationFunc takes a
# third argument, keysutil's RestorePolicy returns no name): the few lines of the
# copy that call them are adapted, nothing else.
vault_module() {
  [ -f "$vault_src/go.sum" ] && [ -f "$vault_src/vault/.patched" ] && return 0
  rm -rf "$vault_src"
  mkdir -p "$vault_src"
  local dir
  dir=$(cd "$vault_src" && go mod download -json "github.com/hashicorp/vault@$VAULT_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  cp -r "$dir" "$vault_src/vault"
  chmod -R u+w "$vault_src/vault"
  sed -i 's|ActivationFunc: iStore.activateDeduplication,|ActivationFunc: func(ctx context.Context, req *logical.Request, _ string) error { return iStore.activateDeduplication(ctx, req) },|' \
    "$vault_src/vault/vault/identity_store.go"
  sed -i 's|b.idStoreBackend.ActivationFunc(ctx, nil)|b.idStoreBackend.ActivationFunc(ctx, nil, "")|' \
    "$vault_src/vault/vault/logical_system_activation_flags.go"
  sed -i 's|restoredKeyName, err := b.lm.RestorePolicy(|restoredKeyName, err := keyName, b.lm.RestorePolicy(|' \
    "$vault_src/vault/builtin/logical/transit/path_restore.go"
  {
    printf 'module porter.local/vault\n\ngo 1.25\n\nrequire github.com/hashicorp/vault %s\n\n' "$VAULT_VERSION"
    printf 'replace github.com/hashicorp/vault => ./vault\n'
    grep -E '^replace ' "$dir/go.mod" | grep -v '=> \./' || true
  } >"$vault_src/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/hashicorp/vault"\n' >"$vault_src/tools.go"
  # -e: tests of Vault's packages import sdk test helpers; the binary needs none.
  (cd "$vault_src" && go mod tidy -e)
  touch "$vault_src/vault/.patched"
}

# Stamp the real version, or the binaries report v0.0.0-master.
k8s_ldflags() {
  local ld="-s -w" p
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$ld"
}

# wrapper_module DIR STAMP MODULE VERSION: a module in DIR whose main package
# (read from stdin) links MODULE@VERSION with only the parts it imports; made
# again only when STAMP (what it was made for) changes.
wrapper_module() {
  local dir=$1 stamp=$2 module=$3 version=$4
  [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$stamp" ] && [ -f "$dir/go.sum" ] && return 0
  rm -rf "$dir" && mkdir -p "$dir"
  cat >"$dir/main.go"
  gofmt -w "$dir/main.go"
  printf 'module porter.local/%s\n\ngo 1.25\n\nrequire %s %s\n' "$(basename "$dir")" "$module" "$version" >"$dir/go.mod"
  (cd "$dir" && go mod tidy)
  echo "$stamp" >"$dir/.stamp"
}

# coredns_module: a main package that links CoreDNS with the plugins of
# deploy/coredns/Corefile only, in CoreDNS's own order (plugin.cfg).
coredns_src=$PORTER_CACHE/src/coredns-$COREDNS_VERSION
COREDNS_PLUGINS=(ready health errors loadbalance cache template kubernetes)
coredns_module() {
  local p
  {
    printf 'package main\n\nimport (\n\t"github.com/coredns/coredns/core/dnsserver"\n\t"github.com/coredns/coredns/coremain"\n\n'
    for p in "${COREDNS_PLUGINS[@]}"; do printf '\t_ "github.com/coredns/coredns/plugin/%s"\n' "$p"; done
    printf ')\n\nfunc init() {\n\tdnsserver.Directives = []string{'
    for p in "${COREDNS_PLUGINS[@]}"; do printf '"%s", ' "$p"; done
    printf '}\n}\n\nfunc main() { coremain.Run() }\n'
  } | wrapper_module "$coredns_src" "$COREDNS_VERSION ${COREDNS_PLUGINS[*]}" github.com/coredns/coredns "$COREDNS_VERSION"
}

# registry_module: a main package of cmd/registry's with the storage driver
# deploy/registry and ocipush's tests use (filesystem) and inmemory (small):
# cmd/registry also links the S3, Azure and GCS drivers and their SDKs, and
# auth and middleware that no config here names.
registry_src=$PORTER_CACHE/src/registry-$DISTRIBUTION_VERSION
REGISTRY_DRIVERS=(filesystem inmemory)
registry_module() {
  local d
  {
    printf 'package main\n\nimport (\n\t"os"\n\n\t"github.com/distribution/distribution/v3/registry"\n'
    for d in "${REGISTRY_DRIVERS[@]}"; do printf '\t_ "github.com/distribution/distribution/v3/registry/storage/driver/%s"\n' "$d"; done
    printf ')\n\nfunc main() {\n\tif err := registry.RootCmd.Execute(); err != nil {\n\t\tos.Exit(1)\n\t}\n}\n'
  } | wrapper_module "$registry_src" "$DISTRIBUTION_VERSION ${REGISTRY_DRIVERS[*]}" github.com/distribution/distribution/v3 "$DISTRIBUTION_VERSION"
}

# Dex's go.mod replaces its api/v2 module with ./api/v2, which the module zip
# lacks: build in a writable copy, with api/v2 generated from the commit's
# api.proto (hack/dex/api.proto) by the pinned protoc plugins.
build_dex() {
  local bin="$TOOLS_BIN/dex-$DEX_VERSION" src="$PORTER_CACHE/src/dex-$DEX_VERSION"
  if [ -x "$bin" ]; then
    log "dex $DEX_VERSION: up to date"
    return 0
  fi
  if [ ! -f "$src/api/v2/api.pb.go" ]; then
    APT_PACKAGES="protobuf-compiler libprotobuf-dev" ensure_apt
    local plugins=$PORTER_CACHE/protoc-plugins dir
    mkdir -p "$plugins"
    [ -x "$plugins/protoc-gen-go" ] || (cd / && GOBIN=$plugins go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION")
    [ -x "$plugins/protoc-gen-go-grpc" ] || (cd / && GOBIN=$plugins go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION")
    dir=$(cd / && go mod download -json "github.com/dexidp/dex@$DEX_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
    [ -n "$dir" ] || { log "the module proxy does not serve github.com/dexidp/dex@$DEX_VERSION"; return 1; }
    rm -rf "$src.tmp" && cp -r "$dir" "$src.tmp" && chmod -R u+w "$src.tmp"
    mkdir -p "$src.tmp/api/v2"
    cp "$REPO_ROOT/hack/dex/api.proto" "$src.tmp/api/v2/api.proto"
    (cd "$src.tmp/api/v2" && PATH=$plugins:$PATH protoc -I . --go_out=. --go_opt=paths=source_relative \
      --go-grpc_out=. --go-grpc_opt=paths=source_relative api.proto)
    printf 'module github.com/dexidp/dex/api/v2\n\ngo 1.25.0\n' >"$src.tmp/api/v2/go.mod"
    rm -rf "$src" && mv "$src.tmp" "$src"
  fi
  (cd "$src" && go build "${GOFLAGS_BUILD[@]}" -ldflags "-s -w" -o "$bin.tmp" ./cmd/dex)
  mv "$bin.tmp" "$bin"
}

build_one() {
  local name=$1 version
  if [ "$name" = dex ]; then build_dex; return; fi
  case $name in
    etcd) version=$ETCD_VERSION ;;
    containerd) version=$CONTAINERD_VERSION ;;
    minio) version=$MINIO_VERSION ;;
    # The driver set is part of the version, as CoreDNS's plugins are.
    registry) version="$DISTRIBUTION_VERSION ${REGISTRY_DRIVERS[*]}" ;;
    # The plugin set is part of the version: a binary built with other plugins is
    # built again.
    coredns) version="$COREDNS_VERSION ${COREDNS_PLUGINS[*]}" ;;
    vault) version=$VAULT_VERSION ;;
    *) version=$(k8s_stamp) ;;
  esac
  local stamp="$TOOLS_BIN/.$name.version" out=$name
  # Vault's binary carries its version in its name (as kwok's does): the tests look
  # for exactly the pinned one.
  [ "$name" != vault ] || out=vault-$version
  if [ -x "$TOOLS_BIN/$out" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$version" ]; then
    log "$name $version: up to date"
    return 0
  fi
  case $name in
    etcd)
      timed "etcd module" etcd_module
      (cd "$etcd_src" && go build "${GOFLAGS_BUILD[@]}" -ldflags "-s -w" -o "$TOOLS_BIN/etcd.tmp" go.etcd.io/etcd/server/v3) ;;
    containerd)
      # The node's runtime and its runc shim, one version. The btrfs, zfs and
      # devmapper snapshotters need cgo or kernel parts this node lacks; the
      # cluster uses overlayfs. `containerd --version` reads the -X variable.
      (cd / && GOBIN="$TOOLS_BIN/.containerd-gobin" go install "${GOFLAGS_BUILD[@]}" -tags "no_btrfs no_zfs no_devmapper" \
        -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
        "github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
        "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION")
      mv "$TOOLS_BIN/.containerd-gobin/containerd-shim-runc-v2" "$TOOLS_BIN/containerd-shim-runc-v2"
      mv "$TOOLS_BIN/.containerd-gobin/containerd" "$TOOLS_BIN/containerd.tmp" ;;
    minio)
      (cd / && GOBIN="$TOOLS_BIN/.minio-gobin" go install "${GOFLAGS_BUILD[@]}" -ldflags "-s -w" "github.com/minio/minio@$MINIO_VERSION")
      mv "$TOOLS_BIN/.minio-gobin/minio" "$TOOLS_BIN/minio.tmp" ;;
    registry)
      # The registry reports its version from this variable ("+unknown" otherwise).
      timed "registry wrapper module" registry_module
      (cd "$registry_src" && go build "${GOFLAGS_BUILD[@]}" \
        -ldflags "-s -w -X github.com/distribution/distribution/v3/version.version=$DISTRIBUTION_VERSION" -o "$TOOLS_BIN/registry.tmp" .) ;;
    coredns)
      # Only the plugins deploy/coredns/Corefile uses: the default set pulls in
      # the cloud providers' SDKs (route53, azure, clouddns), most of its build
      # time. The version variable feeds `coredns -version`.
      timed "coredns wrapper module" coredns_module
      (cd "$coredns_src" && go build "${GOFLAGS_BUILD[@]}" \
        -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$COREDNS_VERSION" -o "$TOOLS_BIN/coredns.tmp" .) ;;
    vault)
      # Only the dev server (`vault server -dev`) is used, by the tests of the Vault
      # credential manager. Vault embeds its version; the web UI is left out (no `ui` tag).
      timed "vault wrapper module" vault_module
      (cd "$vault_src" && go build "${GOFLAGS_BUILD[@]}" -ldflags "-s -w" -o "$TOOLS_BIN/vault.tmp" github.com/hashicorp/vault) ;;
    *)
      timed "kubernetes wrapper module" k8s_module
      (cd "$k8s_src" && go build "${GOFLAGS_BUILD[@]}" -ldflags "$(k8s_ldflags)" -o "$TOOLS_BIN/$name.tmp" "k8s.io/kubernetes/cmd/$name") ;;
  esac
  mv "$TOOLS_BIN/$name.tmp" "$TOOLS_BIN/$out"
  echo "$version" >"$stamp"
}

# The Kubernetes commands that are out of date are built by one `go build`: their
# shared packages compile once, and one command links while the next compiles.
k8s_stale() {
  local c
  for c in "$@"; do
    [ -x "$TOOLS_BIN/$c" ] && [ "$(cat "$TOOLS_BIN/.$c.version" 2>/dev/null)" = "$(k8s_stamp)" ] || echo "$c"
  done
}

build_k8s() {
  local out="$TOOLS_BIN/.k8s-out" c pkgs=()
  for c in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  timed "kubernetes wrapper module" k8s_module
  rm -rf "$out" && mkdir -p "$out"
  (cd "$k8s_src" && go build "${GOFLAGS_BUILD[@]}" -ldflags "$(k8s_ldflags)" -o "$out/" "${pkgs[@]}")
  for c in "$@"; do
    mv "$out/$c" "$TOOLS_BIN/$c"
    k8s_stamp >"$TOOLS_BIN/.$c.version"
  done
  rmdir "$out"
}

k8s_want=() other=()
for c in "${want[@]}"; do
  if [[ " ${K8S_CMDS[*]} " == *" $c "* ]]; then k8s_want+=("$c"); else other+=("$c"); fi
done
# Kubernetes builds beside the other tools: on a fresh machine one build's
# module downloads and single-threaded link overlap the other's compiling.
k8s_pid=
if [ ${#k8s_want[@]} -gt 0 ]; then
  mapfile -t stale < <(k8s_stale "${k8s_want[@]}")
  if [ ${#stale[@]} -gt 0 ]; then
    timed "build ${stale[*]}" build_k8s "${stale[@]}" &
    k8s_pid=$!
  else
    log "kubernetes $K8S_VERSION (${k8s_want[*]}): up to date"
  fi
fi
# A failed build ends the script (set -e); the other one is not left running.
trap 'if [ -n "$k8s_pid" ]; then kill "$k8s_pid" 2>/dev/null || true; fi' EXIT
for c in "${other[@]}"; do
  timed "build $c" build_one "$c"
done
if [ -n "$k8s_pid" ]; then
  wait "$k8s_pid"
  k8s_pid=
fi
