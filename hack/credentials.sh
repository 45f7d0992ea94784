#!/usr/bin/env bash
# Generates the local cluster's MinIO root credentials once, into files that are
# never committed (.gitignore), and the ATC's blobstore settings from them:
#
#   deploy/minio/credentials.env  MINIO_ROOT_USER, MINIO_ROOT_PASSWORD (random)
#   deploy/atc/blobstore.env      PORTER_BLOBSTORE_* for the in-cluster ATC
#
# The kustomizations' secretGenerators read them. Idempotent: existing
# credentials are kept. hack/cluster-up.sh runs it; run it yourself before
# `kubectl apply -k deploy/` on a cluster of your own.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
minio=$root/deploy/minio/credentials.env
atc=$root/deploy/atc/blobstore.env

random() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }

umask 077
if [ ! -s "$minio" ]; then
  printf 'MINIO_ROOT_USER=porter-%s\nMINIO_ROOT_PASSWORD=%s\n' "$(random 4)" "$(random 24)" >"$minio.tmp"
  mv "$minio.tmp" "$minio"
fi
user=$(sed -n 's/^MINIO_ROOT_USER=//p' "$minio")
password=$(sed -n 's/^MINIO_ROOT_PASSWORD=//p' "$minio")
[ -n "$user" ] && [ -n "$password" ] || { echo "credentials: $minio lacks MINIO_ROOT_USER or MINIO_ROOT_PASSWORD" >&2; exit 1; }
cat >"$atc.tmp" <<EOT
PORTER_BLOBSTORE_ENDPOINT=minio.porter-minio.svc:9000
PORTER_BLOBSTORE_BUCKET=porter
PORTER_BLOBSTORE_ACCESS_KEY=$user
PORTER_BLOBSTORE_SECRET_KEY=$password
EOT
mv "$atc.tmp" "$atc"
