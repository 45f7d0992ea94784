#!/usr/bin/env bash
# `make web`: rebuilds the web UI's bundle (pkg/atc/webui/dist, committed so
# that go build needs no node) from web/ with the locked npm dependencies.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
command -v node >/dev/null && command -v npm >/dev/null || APT_PACKAGES="nodejs npm" ensure_apt
cd "$REPO_ROOT/web"
npm ci --no-audit --no-fund --loglevel=error
node build.mjs
