#!/usr/bin/env bash
# Starts or stops a self-contained ClickHouse server on loopback with all state under DIR.
#   server.sh start DIR [TCP_PORT] [HTTP_PORT]   returns once /ping answers, however long the server
#                                                takes to load its parts (says so every 10 s)
#   server.sh stop DIR                           SIGTERM, then SIGKILL after 20 s
# Works with Debian's clickhouse-server 18.16 and with current releases.
# CLICKHOUSE_EXTRA_CONFIG, if set, is XML put inside <yandex> (cluster.sh uses
# it for ZooKeeper, macros, the interserver port and remote_servers).
# CLICKHOUSE_TIMEZONE, if set, is the server's <timezone> (default UTC): tests
# start a server west of UTC to check that nothing depends on it.
# RUN_AS, if set, is a user id the server runs as, DIR given to it (a test's
# firewall tells the servers apart by user).
set -euo pipefail
cmd=${1:?usage: server.sh start|stop DIR [TCP_PORT] [HTTP_PORT]}
dir=$(mkdir -p "${2:?DIR}" && cd "$2" && pwd)
tcp=${3:-9000}
http=${4:-8123}

case "$cmd" in
start)
  bin=$(command -v clickhouse-server || true)
  [ -n "$bin" ] || { echo "clickhouse-server not found: apt-get install -y clickhouse-server" >&2; exit 1; }
  if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
    echo "ClickHouse already running in $dir (pid $(cat "$dir/pid"))" >&2; exit 1
  fi
  mkdir -p "$dir/data" "$dir/tmp" "$dir/user_files" "$dir/format_schemas" "$dir/log"
  cat > "$dir/config.xml" <<XML
<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>$dir/log/server.log</log><errorlog>$dir/log/error.log</errorlog><size>100M</size><count>2</count></logger>
  <listen_host>127.0.0.1</listen_host>
  <tcp_port>$tcp</tcp_port>
  <http_port>$http</http_port>
  <path>$dir/data/</path>
  <tmp_path>$dir/tmp/</tmp_path>
  <user_files_path>$dir/user_files/</user_files_path>
  <format_schema_path>$dir/format_schemas/</format_schema_path>
  <users_config>$dir/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <timezone>${CLICKHOUSE_TIMEZONE:-UTC}</timezone>
  <mark_cache_size>268435456</mark_cache_size>
  <max_concurrent_queries>200</max_concurrent_queries>
  <!-- Parts replaced by merges are deleted after 60 s instead of 480 s: a
       server stopped with many outdated parts loads them all at its next
       start (161 s seen for ~1,700 parts from a cold cache). -->
  <merge_tree><old_parts_lifetime>60</old_parts_lifetime></merge_tree>
  ${CLICKHOUSE_EXTRA_CONFIG:-}
</yandex>
XML
  cat > "$dir/users.xml" <<XML
<?xml version="1.0"?>
<yandex>
  <profiles>
    <default><max_memory_usage>4000000000</max_memory_usage></default>
    <!-- writer-worker's workspace reads: no writes or DDL (readonly 2 lets
         the driver send its per-query settings), bounded time and memory. -->
    <reader>
      <readonly>2</readonly>
      <max_execution_time>10</max_execution_time>
      <max_memory_usage>1000000000</max_memory_usage>
      <max_threads>1</max_threads>
    </reader>
  </profiles>
  <users>
    <default>
      <password></password>
      <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
      <profile>default</profile>
      <quota>default</quota>
    </default>
    <!-- writer-worker's two users: ingest_writer creates the tables and
         inserts, ingest_reader answers the workspace API. On loopback
         without passwords here; a deployment gives them passwords. -->
    <ingest_writer>
      <password></password>
      <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
      <profile>default</profile>
      <quota>default</quota>
    </ingest_writer>
    <ingest_reader>
      <password></password>
      <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
      <profile>reader</profile>
      <quota>default</quota>
    </ingest_reader>
  </users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors><result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval></default></quotas>
</yandex>
XML
  as=()
  if [ -n "${RUN_AS:-}" ]; then
    chown -R "$RUN_AS:$RUN_AS" "$dir"
    as=(setpriv --reuid="$RUN_AS" --regid="$RUN_AS" --clear-groups)
  fi
  "${as[@]}" "$bin" --config-file="$dir/config.xml" >"$dir/log/stdout.log" 2>&1 &
  echo $! > "$dir/pid"
  # Wait as long as the server is alive: with many parts on disk it loads
  # them all before it answers (minutes from a cold page cache).
  start=$(date +%s); said=0
  while :; do
    if curl -sf "http://127.0.0.1:$http/ping" >/dev/null 2>&1; then exit 0; fi
    kill -0 "$(cat "$dir/pid")" 2>/dev/null || { echo "clickhouse-server exited; see $dir/log" >&2; tail -5 "$dir/log/error.log" >&2 || true; exit 1; }
    waited=$(( $(date +%s) - start ))
    if [ "$waited" -ge 10 ] && [ $(( waited / 10 )) -gt "$said" ]; then
      said=$(( waited / 10 ))
      echo "clickhouse-server is loading its data ($(find "$dir/data" -maxdepth 4 -mindepth 4 -type d 2>/dev/null | wc -l) parts on disk), ${waited}s so far..." >&2
    fi
    sleep 0.1
  done
  ;;
stop)
  [ -f "$dir/pid" ] || exit 0
  pid=$(cat "$dir/pid")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/pid"
  ;;
*) echo "unknown command $cmd" >&2; exit 2 ;;
esac
