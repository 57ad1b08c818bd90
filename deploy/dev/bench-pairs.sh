#!/usr/bin/env bash
# Keyed against unkeyed, interleaved (issue 33's procedure): one fresh stack
# of the tree this script is run from (the stack of `make bench`), then
# BENCH_PAIRS pairs (default 5) at each of BENCH_PAIR_RATES (2000,4000)
# open loop, each pair's order alternating, BENCH_MIXED_RUNS (3) runs at
# each rate with each device keyed and unkeyed in turn, and BENCH_CLOSED_PAIRS (3)
# closed-loop pairs at 256 connections; 20 s runs, 1,000 devices. Each run's
# lines go to OUT (bench/out/pairs.txt) under a header naming LABEL (the
# tree's commit), the pair and the kind. To compare two commits, run it in
# each tree (`git worktree add ../old <commit>`) one after the other.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
label=${LABEL:-$(git rev-parse --short HEAD)}
out=${OUT:-$root/bench/out/pairs.txt}
mkdir -p "$(dirname "$out")"
make build >/dev/null
. deploy/dev/bench-stack.sh
lg() {
  echo "# $label $1" >>"$out"
  shift
  bin/loadgen -target "http://$INGEST_ADDR" -workspace "http://$WORKSPACE_ADDR" -clickhouse-http "http://127.0.0.1:$CLICKHOUSE_HTTP_PORT" \
    -devices 1000 -pids "$pids" -out "$out" -duration 20s "$@"
}
for i in $(seq 1 "${BENCH_PAIRS:-5}"); do
  for rate in $(echo "${BENCH_PAIR_RATES:-2000,4000}" | tr , ' '); do
    if [ $((i % 2)) = 1 ]; then
      lg "pair $i rate $rate unkeyed" -rates "$rate"; lg "pair $i rate $rate keyed" -rates "$rate" -keyed
    else
      lg "pair $i rate $rate keyed" -rates "$rate" -keyed; lg "pair $i rate $rate unkeyed" -rates "$rate"
    fi
  done
done
# Both paths under the same load at once: each device's requests keyed and
# unkeyed in turn (loadgen -mixed), their latencies reported apart on a
# "mixed" line.
for i in $(seq 1 "${BENCH_MIXED_RUNS:-3}"); do
  for rate in $(echo "${BENCH_PAIR_RATES:-2000,4000}" | tr , ' '); do
    lg "mixed $i rate $rate" -rates "$rate" -mixed
  done
done
for i in $(seq 1 "${BENCH_CLOSED_PAIRS:-3}"); do
  if [ $((i % 2)) = 1 ]; then
    lg "closed $i unkeyed" -conc 256; lg "closed $i keyed" -conc 256 -keyed
  else
    lg "closed $i keyed" -conc 256 -keyed; lg "closed $i unkeyed" -conc 256
  fi
done
