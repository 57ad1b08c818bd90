#!/usr/bin/env bash
# The Go SDK's drain against the service's own backlog rate (docs/sdk.md,
# "Speed"): the whole stack as `make bench` starts it, on ports of its own
# (SDK_PORT_BASE, 28000) with state in a new directory under .run/, then
#   deploy/dev/bench-sdk.sh drain   loadgen's backlog levels (1 device, 1
#       connection, 1,000 messages a request, without and with an
#       Idempotency-Key, which the SDK sends; 1,000 devices, 32 connections,
#       100 a request), then the SDK drains a queue of SDK_READINGS
#       (1,000,000) readings of two inputs, one device, DEVICE_RATE=0
#   deploy/dev/bench-sdk.sh week    a week's outage of one reading per 10 s
#       (60,480) drained at DEVICE_RATE=1000 (the limit that allows 2 minutes)
# Each prints readings/s, the SDK's CPU seconds and the values ClickHouse
# holds; loadgen's lines go to bench/out/results.txt.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
mode=${1:-drain}
base=${SDK_PORT_BASE:-28000}
export RUN_DIR=$root/.run/sdk-$mode-$(date +%Y%m%d-%H%M%S)-$$ NATS_PORT=$((base + 222)) CLICKHOUSE_PORT=$((base + 200)) \
  CLICKHOUSE_HTTP_PORT=$((base + 223)) INGEST_ADDR=127.0.0.1:$((base + 80)) MAPPER_HEALTH_ADDR=127.0.0.1:$((base + 81)) \
  WRITER_HEALTH_ADDR=127.0.0.1:$((base + 82)) INGEST_METRICS_ADDR=127.0.0.1:$((base + 83)) \
  WORKSPACE_ADDR=127.0.0.1:$((base + 84)) LOG_LEVEL=warn
export ADMIN_TOKEN=${ADMIN_TOKEN:-sdk-admin-token-$RANDOM$RANDOM}
case $mode in
  drain) export DEVICE_RATE=0; readings=${SDK_READINGS:-1000000}; step=0 ;;
  week) export DEVICE_RATE=1000 DEVICE_BURST=1000; readings=60480; step=10000 ;;
  *) echo "usage: $0 drain|week" >&2; exit 1 ;;
esac
go build -o bin/ ./ingest-api ./mapper-worker ./writer-worker ./bench/loadgen
go build -o bin/nats-server github.com/nats-io/nats-server/v2
(cd sdk/go && go build -o ../../bin/dsq-driver ./tools/dsq-driver)
mkdir -p bench/out
. deploy/dev/stack.sh
start_stack
ch="http://127.0.0.1:$CLICKHOUSE_HTTP_PORT/"
if [ "$mode" = drain ] && [ "${SDK_LOADGEN:-1}" != 0 ]; then
  echo "# bench-sdk.sh $(git rev-parse --short HEAD) loadgen backlog levels" >>bench/out/results.txt
  for keyed in "" -keyed; do
    bin/loadgen -target "http://$INGEST_ADDR" -workspace "http://$WORKSPACE_ADDR" -clickhouse-http "$ch" \
      -devices 1 -conc 1 -batch 1000 -duration "${SDK_LOADGEN_DURATION:-20s}" -pids "$pids" -out bench/out/results.txt $keyed
  done
  bin/loadgen -target "http://$INGEST_ADDR" -workspace "http://$WORKSPACE_ADDR" -clickhouse-http "$ch" \
    -devices 1000 -conc 32 -batch 100 -duration "${SDK_LOADGEN_DURATION:-20s}" -pids "$pids" -out bench/out/results.txt
fi
serial=sdk-bench-$mode
token=sdk-bench-token-$RANDOM$RANDOM$RANDOM
# Secrets go to curl on stdin and in a header file, not on its command line.
printf 'Authorization: Bearer %s\n' "$ADMIN_TOKEN" >"$RUN_DIR/admin.header"
printf '{"accessToken":"%s","inputs":[{"name":"v","entity":"%s","entityInput":"v"},{"name":"w","entity":"%s","entityInput":"w"}]}' \
  "$token" "$serial" "$serial" | curl -sf -X PUT "http://$WORKSPACE_ADDR/api/v1/admin/devices/$serial" -H @"$RUN_DIR/admin.header" --data @- >/dev/null
q=$RUN_DIR/sdk-queue
DSQ_MAX_MB=1024 bin/dsq-driver fill "$q" "$readings" 0 "$step" >/dev/null
echo "queue: $readings readings, $(du -sm "$q" | cut -f1) MiB"
status=$(DSQ_TOKEN=$token DSQ_MAX_MB=1024 bin/dsq-driver send "$q" "http://$INGEST_ADDR" "$serial" 600)
echo "sdk: $status"
values=$(curl -sf "$ch" --data-binary "SELECT count(), uniqExact(value_json), toDateTime(intDiv(min(ts_ns), 1000000000)), toDateTime(intDiv(max(ts_ns), 1000000000)) FROM device_events.input_values WHERE entity = '$serial' AND input = 'v'")
echo "$status" | python3 -c '
import json, sys
s = json.load(sys.stdin); n = int(sys.argv[1]); secs = s["seconds"]; cpu = s["cpu_seconds"]; left = s["queued"]
print(f"sdk {sys.argv[2]}: {n} readings in {secs:.1f} s = {n / secs:,.0f} readings/s; SDK CPU {cpu:.1f} s ({100 * cpu / secs:.0f}% of one core); queued {left}; v values stored (rows, distinct, first and last reading time): {sys.argv[3]}")
' "$readings" "$mode" "$values" | tee -a bench/out/results.txt
