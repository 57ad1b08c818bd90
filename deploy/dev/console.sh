#!/usr/bin/env bash
# Builds the console (console/, npm + esbuild) into
# ingest-api/internal/console/dist, which ingest-api embeds. npm ci runs when
# node_modules is missing or older than package-lock.json.
set -euo pipefail
cd "$(dirname "$0")/../../console"
if ! command -v npm >/dev/null 2>&1; then
  echo "npm is needed to build the console (Debian: apt-get install -y nodejs npm)" >&2; exit 1
fi
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
node build.mjs
