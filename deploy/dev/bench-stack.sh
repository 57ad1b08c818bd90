# Sourced by bench.sh and bench-pairs.sh (from the repository's root): the
# bench's own ports and state under .run/bench (BENCH_*_PORT override), the
# load generator built, the last run's state deleted and ext4's window waited
# out, then the stack started (deploy/dev/stack.sh: pids, stopped at exit).
# BENCH_RUN_DIR puts the state elsewhere: on tmpfs (/dev/shm/bench), two
# commits compared on this machine meet the same ClickHouse file costs
# (docs/performance.md, "ClickHouse's files and this machine's disk").
export RUN_DIR=${BENCH_RUN_DIR:-$root/.run/bench} NATS_PORT=${BENCH_NATS_PORT:-14222} CLICKHOUSE_PORT=${BENCH_CLICKHOUSE_PORT:-19200} \
  CLICKHOUSE_HTTP_PORT=${BENCH_CLICKHOUSE_HTTP_PORT:-18223} INGEST_ADDR=127.0.0.1:${BENCH_INGEST_PORT:-18080} \
  MAPPER_HEALTH_ADDR=127.0.0.1:18081 WRITER_HEALTH_ADDR=127.0.0.1:18082 INGEST_METRICS_ADDR=127.0.0.1:18083 WORKSPACE_ADDR=127.0.0.1:${BENCH_WORKSPACE_PORT:-18084} \
  LOG_LEVEL=warn
export ADMIN_TOKEN=${ADMIN_TOKEN:-bench-admin-token-$RANDOM$RANDOM}
go build -o bin/loadgen ./bench/loadgen
mkdir -p bench/out
if [ -d "$RUN_DIR" ]; then
  # Only a bench stack's state is deleted (a BENCH_RUN_DIR given by
  # mistake, such as /dev/shm itself, is not).
  if [ -n "$(ls -A "$RUN_DIR")" ] && [ ! -d "$RUN_DIR/pids" ]; then
    echo "$RUN_DIR holds something other than a bench stack's state: not deleted" >&2
    exit 1
  fi
  rm -rf "$RUN_DIR"
  # On ext4 without a journal (these machines' root), a new file skips the
  # inodes freed in the last 60 s (5 minutes while their inode table block
  # is unwritten), scanning past each: ClickHouse creates ~20 files per
  # insert, and the previous run's tens of thousands of deleted files made
  # its inserts several times dearer (seen in perf as recently_deleted in
  # ext4_create). Measure after that window; tmpfs has none.
  if [ "$(stat -f -c %T "$(dirname "$RUN_DIR")")" != tmpfs ]; then
    sync
    sleep "${BENCH_SETTLE:-65}"
  fi
fi
. deploy/dev/stack.sh
start_stack
