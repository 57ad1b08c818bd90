#!/usr/bin/env bash
# Backfill under load, run by bench.sh against its stack (INGEST_ADDR, WORKSPACE_ADDR,
# CLICKHOUSE_HTTP_PORT, ADMIN_TOKEN and PIDS set): a month of one device's
# raw messages (259,200, one every 10 s, two inputs: 518,400 readings) is
# written straight into the raw log, then backfilled while an open-loop
# 2,000/s load runs; each such level follows one without a backfill, so the
# pair meets ClickHouse in the same state, and each pair starts after a
# pause (BENCH_BACKFILL_SETTLE) that lets the merges of the last backfill's
# parts end. Prints the backfill's readings/s; the levels' latency lines go
# to bench/out/results.txt.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p bench/out
rate=${BENCH_BACKFILL_RATE:-2000} secs=${BENCH_BACKFILL_SECONDS:-20} pairs=${BENCH_BACKFILL_PAIRS:-2}
api=http://$WORKSPACE_ADDR/api/v1/admin ch="http://127.0.0.1:$CLICKHOUSE_HTTP_PORT/"
auth="Authorization: Bearer $ADMIN_TOKEN"
n=259200
load() {
  bin/loadgen -target "http://$INGEST_ADDR" -workspace "http://$WORKSPACE_ADDR" -clickhouse-http "$ch" -devices "${BENCH_DEVICES:-1000}" -rates "$rate" \
    -duration "${secs}s" -pids "$PIDS" -out bench/out/results.txt
}
for pair in $(seq 1 "$pairs"); do
  serial=bf-bench-$pair-$RANDOM
  curl -sf -X PUT "$api/devices/$serial" -H "$auth" -d '{"inputs":[{"name":"temp","entity":"bf-bench","entityInput":"temp"},{"name":"hum","entity":"bf-bench","entityInput":"hum"}]}' >/dev/null
  end=$(( ($(date +%s) - 60) * 1000000000 )); start=$(( end - n * 10000000000 ))
  curl -sf "$ch" --data-binary "INSERT INTO device_events.device_messages (serial, ts_ns, event_id, payload, outcome, reading_ns, time_note, token)
    SELECT '$serial', toInt64($start + number * 10000000000), toString(generateUUIDv4()),
      concat('{\"serial\":\"$serial\",\"data\":{\"temp\":', toString(round(20 + 5 * sin(number / 600), 2)), ',\"hum\":', toString(number % 100), '}}'),
      'No connections configured', toInt64($start + number * 10000000000 - 2000000000), '', 'token-1' FROM system.numbers LIMIT $n"
  sleep "${BENCH_BACKFILL_SETTLE:-45}"
  echo "# backfill pair $pair: open loop $rate/s for ${secs}s without a backfill, then with one" | tee -a bench/out/results.txt
  load
  from=$(date -u -d "@$(( start / 1000000000 ))" +%Y-%m-%dT%H:%M:%SZ) to=$(date -u -d "@$(( end / 1000000000 + 1 ))" +%Y-%m-%dT%H:%M:%SZ)
  id=$(curl -sf -X POST "$api/devices/$serial/backfills" -H "$auth" -d "{\"from\":\"$from\",\"to\":\"$to\"}" | sed -E 's/.*"id":"([^"]+)".*/\1/')
  load
  for _ in $(seq 1 600); do
    view=$(curl -sf "$api/devices/$serial/backfills" -H "$auth")
    case "$view" in *'"state":"done"'*|*'"state":"failed"'*|*'"state":"cancelled"'*) break ;; esac
    sleep 1
  done
  echo "$view" | node -e '
    const b = JSON.parse(require("fs").readFileSync(0, "utf8")).backfills[0];
    const secs = (Date.parse(b.finished) - Date.parse(b.started)) / 1000;
    console.log(`# backfill ${b.id}: ${b.state}, ${b.messages} messages, ${b.readings} readings stored, ${b.skipped} skipped in ${secs.toFixed(1)} s: ${Math.round(b.readings / secs)} readings/s`);' \
    | tee -a bench/out/results.txt
done
