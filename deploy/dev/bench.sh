#!/usr/bin/env bash
# `make bench`: the whole stack as `make run` starts it (own ports and state
# under .run/bench), 1,000 devices, closed-loop load at 16/64/256/1024
# connections, a backlog level, open-loop rates (unkeyed and keyed) from
# bench/loadgen, one result line per level, appended to bench/out/results.txt;
# then the aggregated-series benchmark on the stack's ClickHouse. bench/out/
# is not tracked: the runs docs/performance.md quotes are copied into
# bench/results.txt, the record, by whoever quotes them.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
. deploy/dev/bench-stack.sh
bin/loadgen -target "http://$INGEST_ADDR" -workspace "http://$WORKSPACE_ADDR" -clickhouse-http "http://127.0.0.1:$CLICKHOUSE_HTTP_PORT" \
  -devices "${BENCH_DEVICES:-1000}" -conc "${BENCH_CONC:-16,64,256,1024}" -duration "${BENCH_DURATION:-10s}" \
  -pids "${pids%,}" -out bench/out/results.txt ${BENCH_KEYED:+-keyed}
# Backlogs: 100 messages of 2 inputs per request, 32 connections.
if [ "${BENCH_BATCH:-100}" != 0 ]; then
  bin/loadgen -target "http://$INGEST_ADDR" -workspace "http://$WORKSPACE_ADDR" -clickhouse-http "http://127.0.0.1:$CLICKHOUSE_HTTP_PORT" \
    -devices "${BENCH_DEVICES:-1000}" -conc "${BENCH_BATCH_CONC:-32}" -duration "${BENCH_DURATION:-10s}" \
    -pids "${pids%,}" -out bench/out/results.txt -batch "${BENCH_BATCH:-100}"
fi
# Open loop: constant arrival rates (latency from each request's scheduled
# time, HDR percentiles, CPU per event), unkeyed; then each keyed rate right
# after an unkeyed run at the same rate, so that the pair meets ClickHouse
# in the same state (the sweep leaves parts to merge).
if [ "${BENCH_OPEN_RATES:-1000,2000,3000,4000,6000,8000}" != 0 ]; then
  bin/loadgen -target "http://$INGEST_ADDR" -workspace "http://$WORKSPACE_ADDR" -clickhouse-http "http://127.0.0.1:$CLICKHOUSE_HTTP_PORT" \
    -devices "${BENCH_DEVICES:-1000}" -rates "${BENCH_OPEN_RATES:-1000,2000,3000,4000,6000,8000}" -duration "${BENCH_OPEN_DURATION:-20s}" \
    -pids "${pids%,}" -out bench/out/results.txt ${BENCH_TIMELINE:+-timeline}
  for rate in $(echo "${BENCH_OPEN_KEYED_RATES:-2000,4000}" | tr , ' '); do
    for keyed in "" -keyed; do
      bin/loadgen -target "http://$INGEST_ADDR" -workspace "http://$WORKSPACE_ADDR" -clickhouse-http "http://127.0.0.1:$CLICKHOUSE_HTTP_PORT" \
        -devices "${BENCH_DEVICES:-1000}" -rates "$rate" -duration "${BENCH_OPEN_DURATION:-20s}" \
        -pids "${pids%,}" -out bench/out/results.txt $keyed ${BENCH_TIMELINE:+-timeline}
    done
  done
fi
# Backfill under load: a month of one device's raw messages backfilled
# beside an open-loop 2,000/s, paired with the same level without it.
if [ "${BENCH_BACKFILL_PAIRS:-2}" != 0 ]; then
  PIDS="${pids%,}" deploy/dev/bench-backfill.sh
fi
# A week of one reading per second, aggregated for a 7-day chart, in a
# database of its own on the stack's ClickHouse (target: 200 ms).
CLICKHOUSE_TEST_ADDR=127.0.0.1:$CLICKHOUSE_PORT go test -run '^$' -bench SeriesWeek -count 5 ./writer-worker/internal/chstore/ | tee bench/out/series.txt
# What the programs' own metrics saw (the same numbers an operator's
# Prometheus would scrape while the benchmark runs).
echo "# metrics after the run"
for m in "$INGEST_METRICS_ADDR" "$MAPPER_HEALTH_ADDR" "$WRITER_HEALTH_ADDR"; do
  curl -sf "http://$m/metrics" | grep -E '^(ingest_api_requests_total|ingest_api_publish_errors_total|mapper_worker_envelopes_published_total|writer_worker_rows_stored_total|writer_worker_insert_duration_seconds_count|writer_worker_keyed_repeats_total|writer_worker_consumer_pending_messages|writer_worker_event_age_seconds_(sum|count)|writer_worker_insert_duration_seconds_sum|ingest_api_outcome_wait_seconds_(sum|count)|ingest_api_publish_batch_events_(sum|count)|mapper_worker_envelope_events_(sum|count))' || true
done
