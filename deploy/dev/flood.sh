#!/usr/bin/env bash
# A flood beside the honest fleet (bench/loadgen -flood; docs/performance.md,
# "Diagnostics under a flood"): the whole stack as `make bench` starts it,
# on ports of its own (FLOOD_PORT_BASE, 27000: NATS +222, ClickHouse +200
# and +223, ingest-api +80 and +83, the workers +81 and +82) and with state
# in a new directory under .run/ (nothing deleted: see performance.md on
# ext4), 1,000 devices, then loadgen with the arguments given, e.g.
#   deploy/dev/flood.sh -rates 0,1000 -flood unknown -flood-rate 10000 -duration 60s
# Its lines are appended to bench/out/results.txt. The programs see the
# environment, so SOURCE_AUTH_FAILURES=1000000 deploy/dev/flood.sh ... raises
# the per-address limit. bin/ holds the programs (`make build`).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
base=${FLOOD_PORT_BASE:-27000}
export RUN_DIR=$root/.run/flood-$(date +%Y%m%d-%H%M%S)-$$ NATS_PORT=$((base + 222)) CLICKHOUSE_PORT=$((base + 200)) \
  CLICKHOUSE_HTTP_PORT=$((base + 223)) INGEST_ADDR=127.0.0.1:$((base + 80)) MAPPER_HEALTH_ADDR=127.0.0.1:$((base + 81)) \
  WRITER_HEALTH_ADDR=127.0.0.1:$((base + 82)) INGEST_METRICS_ADDR=127.0.0.1:$((base + 83)) LOG_LEVEL=warn
export ADMIN_TOKEN=${ADMIN_TOKEN:-flood-admin-token-$RANDOM$RANDOM}
go build -o bin/loadgen ./bench/loadgen
mkdir -p bench/out
. deploy/dev/stack.sh
start_stack
tags=$(go version -m bin/ingest-api | sed -n 's/.*-tags=\([^ ]*\).*/\1/p')
echo "# flood.sh $(git rev-parse --short HEAD) ingest-api tags=${tags:-none} SOURCE_AUTH_FAILURES=${SOURCE_AUTH_FAILURES:-default} $*" >>bench/out/results.txt
NATS_OPERATOR_PASSWORD=$(sed -n 's/^NATS_OPERATOR_PASSWORD=//p' "$RUN_DIR/nats.env") \
  bin/loadgen -target "http://$INGEST_ADDR" -clickhouse-http "http://127.0.0.1:$CLICKHOUSE_HTTP_PORT" \
  -nats "nats://127.0.0.1:$NATS_PORT" -devices "${FLOOD_DEVICES:-1000}" -pids "${pids%,}" -out bench/out/results.txt "$@"
