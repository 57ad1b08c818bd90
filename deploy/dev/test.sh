#!/usr/bin/env bash
# `make test`: installs what is missing (ClickHouse, chromium), builds the
# console, starts a ClickHouse server for the run, then unit, fuzz-seed,
# integration and browser tests (NATS runs in-process in the tests themselves),
# and the device SDKs' own tests.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
deploy/dev/deps.sh test
# The console is embedded in ingest-api: build it before the programs.
deploy/dev/console.sh
port=${CLICKHOUSE_TEST_PORT:-19000}
http=${CLICKHOUSE_TEST_HTTP_PORT:-18123}
dir=$root/.run/test-clickhouse
deploy/clickhouse/server.sh stop "$dir" >/dev/null 2>&1 || true
rm -rf "$dir"
deploy/clickhouse/server.sh start "$dir" "$port" "$http"
# If the server died during the run (every later test then fails to
# connect), say how: its crash report, or the kernel's out-of-memory kill.
gone() {
  kill -0 "$(cat "$dir/pid" 2>/dev/null)" 2>/dev/null && return 0
  echo "the run's ClickHouse server ($dir) is gone; the end of its logs:" >&2
  grep -h -E "Received signal|####|Segmentation|Terminate|std::exception|Logical error" "$dir"/log/*.log 2>/dev/null | tail -30 >&2 || true
  tail -5 "$dir/log/stdout.log" >&2 2>/dev/null || true
  dmesg 2>/dev/null | grep -i -E "out of memory|killed process|oom" | tail -5 >&2 || true
}
trap 'gone; deploy/clickhouse/server.sh stop "$dir"' EXIT
export CLICKHOUSE_TEST_ADDR=127.0.0.1:$port
go vet ./...
# The container build, as deploy/Dockerfile does it: static binaries.
tmp=$(mktemp -d); trap 'rm -rf "$tmp"; gone; deploy/clickhouse/server.sh stop "$dir"' EXIT
for p in ingest-api mapper-worker writer-worker; do
  CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$tmp/$p" "./$p"
done
if docker compose version >/dev/null 2>&1; then
  secrets="ADMIN_TOKEN=ci TOKEN_KEY=ci NATS_INGEST_PASSWORD=ci NATS_MAPPER_PASSWORD=ci NATS_WRITER_PASSWORD=ci NATS_OPERATOR_PASSWORD=ci CLICKHOUSE_WRITER_PASSWORD=ci CLICKHOUSE_READER_PASSWORD=ci"
  env $secrets docker compose config --quiet
  env $secrets docker compose --profile monitoring config --quiet
fi
if command -v kubectl >/dev/null 2>&1; then
  kubectl kustomize deploy/kubernetes >/dev/null
fi
# The C SDK's driver, which the integration tests run as a device process.
make -s -C sdk/c build/dsq-driver
# GOTEST_TIMEOUT: make partition runs longer than the 30 minutes a test run
# gets otherwise (its 20 faults took 29 min before the 18th ended).
go test -count=1 -timeout "${GOTEST_TIMEOUT:-30m}" ${GOTEST_FLAGS:-} ./...
# The device SDKs (docs/sdk.md): the Go SDK is a module of its own; the C
# SDK's unit tests run under gcc and clang, with ASan+UBSan and valgrind.
if [ -z "${GOTEST_FLAGS:-}" ]; then
  (cd sdk/go && go vet ./... && go test -race -count=1 -timeout 5m ./...)
  make -s -C sdk/c test
fi
