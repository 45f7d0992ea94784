#!/usr/bin/env bash
# Regenerates the committed protobuf code from the .proto files (the source of truth).
# protoc comes from Debian; the Go plugins are pinned in versions.env.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
APT_PACKAGES="protobuf-compiler libprotobuf-dev" ensure_apt

plugins=$PORTER_CACHE/protoc-plugins
install_plugin() {
  local pkg=$1 version=$2 name=${1##*/}
  [ "$(cat "$plugins/.$name.version" 2>/dev/null)" = "$version" ] && return 0
  (cd / && GOBIN=$plugins go install "$pkg@$version")
  echo "$version" >"$plugins/.$name.version"
}
mkdir -p "$plugins"
install_plugin google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION"
install_plugin google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"

cd "$REPO_ROOT"
mapfile -t protos < <(find pkg -name "*.proto" | sort)
PATH=$plugins:$PATH protoc -I . -I /usr/include \
  --go_out=. --go_opt=paths=source_relative \
  --go-grpc_out=. --go-grpc_opt=paths=source_relative \
  "${protos[@]}"
log "generated code for ${protos[*]}"

# The modules Porter's commands compile with client-go, at go.mod's versions:
# the local cluster's Kubernetes build requires the same (hack/build-tools.sh), so
# the two share compiled packages. internal/buildshare's test computes the list
# and, without -update, checks it.
go test -count=1 ./internal/buildshare -run TestSharedModulesListIsCurrent -args -update >/dev/null
log "wrote hack/k8s-shared-modules.txt"
