# Sourced by bench.sh and flood.sh: start_stack runs the stack as `make run`
# does (RUN_DIR and the ports exported by the caller), stops it when the
# caller exits, waits until it is ready, and sets pids to name=pid,... of
# its processes (the load generator's -pids).
start_stack() {
  mkdir -p "$RUN_DIR" bench
  setsid deploy/dev/run.sh >"$RUN_DIR/run.out" 2>&1 &
  runner=$!
  trap 'kill -TERM -- -"$runner" 2>/dev/null || kill -TERM "$runner" 2>/dev/null || true; wait "$runner" 2>/dev/null || true' EXIT
  for _ in $(seq 1 600); do
    [ -f "$RUN_DIR/ready" ] && break
    kill -0 "$runner" 2>/dev/null || { cat "$RUN_DIR/run.out" >&2; exit 1; }
    sleep 0.1
  done
  [ -f "$RUN_DIR/ready" ] || { echo "stack did not start" >&2; cat "$RUN_DIR/run.out" >&2; exit 1; }
  pids=""
  for n in api mapper writer nats clickhouse; do pids="$pids$n=$(cat "$RUN_DIR/pids/$n"),"; done
  pids=${pids%,}
}
