#!/usr/bin/env bash
# `make run`: the whole stack on loopback, state under .run/, stopped on Ctrl-C.
# Each program serves /debug/pprof on its metrics address (below); PPROF=1 profiles NATS on 127.0.0.1:6064.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
state=${RUN_DIR:-$root/.run}
bin=$root/bin
: "${NATS_PORT:=4222}" "${CLICKHOUSE_PORT:=9000}" "${CLICKHOUSE_HTTP_PORT:=8123}"
: "${INGEST_ADDR:=127.0.0.1:8080}" "${MAPPER_HEALTH_ADDR:=127.0.0.1:8081}" "${WRITER_HEALTH_ADDR:=127.0.0.1:8082}"
: "${INGEST_METRICS_ADDR:=127.0.0.1:8083}" "${WORKSPACE_ADDR:=127.0.0.1:8084}"
dev_flag=""
if [ -z "${ADMIN_TOKEN:-}" ]; then
  ADMIN_TOKEN=dev-admin-token
  dev_flag="-dev"
  echo "ADMIN_TOKEN not set: using the development token '$ADMIN_TOKEN'"
fi
export NATS_URL="nats://127.0.0.1:$NATS_PORT"
rm -f "$state/ready"
mkdir -p "$state/logs" "$state/nats" "$state/pids"

# NATS passwords, one per user (deploy/nats/auth.conf), generated once and
# kept in $state/nats.env (mode 600); the operator's is for the nats CLI
# and `writer-worker dead-letters`.
if [ ! -s "$state/nats.env" ]; then
  ( umask 077
    for u in INGEST MAPPER WRITER OPERATOR; do
      echo "NATS_${u}_PASSWORD=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')"
    done > "$state/nats.env" )
fi
. "$state/nats.env" # not exported: each program gets its own password only
# TOKEN_KEY: device tokens are kept in the registry as keyed digests and
# sealed copies under it; generated once and kept with the registry it
# protects (a registry is unreadable without its key).
if [ -z "${TOKEN_KEY:-}" ]; then
  if [ ! -s "$state/token.env" ]; then
    ( umask 077; echo "TOKEN_KEY=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" > "$state/token.env" )
  fi
  . "$state/token.env"
fi

pids=()
stop() {
  trap - INT TERM EXIT
  echo "stopping..."
  for ((i=${#pids[@]}-1; i>=0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  deploy/clickhouse/server.sh stop "$state/clickhouse" || true
  echo "stopped"
}
trap stop EXIT
trap 'stop; exit 0' INT TERM

wait_http() { # url what
  for _ in $(seq 1 300); do curl -sf "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "$2 did not become ready ($1); logs in $state/logs" >&2; exit 1
}

env $(cat "$state/nats.env") "$bin/nats-server" -c deploy/nats/nats.conf -js -a 127.0.0.1 -p "$NATS_PORT" -sd "$state/nats" -m 0 ${PPROF:+--profile 6064} >"$state/logs/nats.log" 2>&1 &
pids+=($!); echo $! > "$state/pids/nats"
deploy/clickhouse/server.sh start "$state/clickhouse" "$CLICKHOUSE_PORT" "$CLICKHOUSE_HTTP_PORT"
echo "NATS on 127.0.0.1:$NATS_PORT, ClickHouse on 127.0.0.1:$CLICKHOUSE_PORT (http $CLICKHOUSE_HTTP_PORT)"

CLICKHOUSE_URL="clickhouse://ingest_writer@127.0.0.1:$CLICKHOUSE_PORT/device_events" CLICKHOUSE_READ_USER=ingest_reader METRICS_ADDR=$WRITER_HEALTH_ADDR NATS_USER=writer-worker NATS_PASSWORD=$NATS_WRITER_PASSWORD \
  "$bin/writer-worker" >"$state/logs/writer-worker.log" 2>&1 &
pids+=($!); echo $! > "$state/pids/writer"
METRICS_ADDR=$MAPPER_HEALTH_ADDR NATS_USER=mapper-worker NATS_PASSWORD=$NATS_MAPPER_PASSWORD \
  "$bin/mapper-worker" >"$state/logs/mapper-worker.log" 2>&1 &
pids+=($!); echo $! > "$state/pids/mapper"
HTTP_ADDR=$INGEST_ADDR WORKSPACE_ADDR=$WORKSPACE_ADDR METRICS_ADDR=$INGEST_METRICS_ADDR ADMIN_TOKEN=$ADMIN_TOKEN TOKEN_KEY=$TOKEN_KEY NATS_USER=ingest-api NATS_PASSWORD=$NATS_INGEST_PASSWORD \
  "$bin/ingest-api" $dev_flag >"$state/logs/ingest-api.log" 2>&1 &
pids+=($!); echo $! > "$state/pids/api"
wait_http "http://$WRITER_HEALTH_ADDR/readyz" writer-worker
wait_http "http://$MAPPER_HEALTH_ADDR/readyz" mapper-worker
wait_http "http://$INGEST_ADDR/readyz" ingest-api
cp "$state/clickhouse/pid" "$state/pids/clickhouse"
touch "$state/ready"

cat <<TXT

Device event service is up (logs in $state/logs):
  devices post to    http://$INGEST_ADDR  (the device port: the device endpoints only)
  console, workspace http://$WORKSPACE_ADDR  (keep it off the public network)

Console: http://$WORKSPACE_ADDR/console/  (sign in with the admin token, ADMIN_TOKEN)
  Create a device there (for instance serial dev-001, input temp connected to entity boiler-1,
  entity input temperature, access token revealed on its page), then post readings with it:

Or create a device with curl:
  curl -s -X PUT http://$WORKSPACE_ADDR/api/v1/admin/devices/dev-001 -H "Authorization: Bearer $ADMIN_TOKEN" \\
    -d '{"connectionType":"API","accessToken":"secret-token-0001","inputs":[{"name":"temp","entity":"boiler-1","entityInput":"temperature"}]}'
Post a reading (the token: secret-token-0001 for the curl device, or the one the console shows):
  curl -s http://$INGEST_ADDR/api/v1/deviceapi/event -H 'Content-Type: application/json' -H 'Authorization: Bearer secret-token-0001' \\
    -d '{"serial":"dev-001","data":{"temp":21.5}}'
Read it back:
  curl -s http://$WORKSPACE_ADDR/api/v1/admin/entities/boiler-1/inputs/temperature/latest -H "Authorization: Bearer $ADMIN_TOKEN"
  clickhouse-client --port $CLICKHOUSE_PORT -q 'SELECT * FROM device_events.input_values ORDER BY ts_ns DESC LIMIT 5'

Metrics (Prometheus text): http://$INGEST_METRICS_ADDR/metrics http://$MAPPER_HEALTH_ADDR/metrics http://$WRITER_HEALTH_ADDR/metrics
API documents: http://$INGEST_ADDR/api/v1/openapi.json (device API), http://$WORKSPACE_ADDR/api/v1/openapi.json (workspace API)

Ctrl-C stops everything.
TXT
# Stay up until a signal, or until any program exits on its own.
while :; do
  for p in "${pids[@]}"; do
    if ! kill -0 "$p" 2>/dev/null; then echo "a program exited; see $state/logs" >&2; exit 1; fi
  done
  sleep 1 & wait $! || true
done
