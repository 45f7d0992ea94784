#!/usr/bin/env bash
# `make web`: rebuilds the web UI's bundle (pkg/atc/webui/dist, committed so
# that go build needs no node) from web/ with the locked npm dependencies.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
command -v node >/dev/null && command -v npm >/dev/null || APT_PACKAGES="nodejs npm" ensure_apt
cd "$REPO_ROOT/web"
npm ci --no-audit --no-fund --loglevel=error
# The front end's pure logic (web/test, node's own test runner) first: a
# bundle is not rebuilt from sources whose tests fail.
npm test --silent
node build.mjs
