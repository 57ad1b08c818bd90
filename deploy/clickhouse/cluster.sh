#!/usr/bin/env bash
# Starts or stops replicated ClickHouse on one machine: a ZooKeeper (Debian's
# 3.8 package, run directly) and N ClickHouse replicas of one shard, all on
# loopback, with state under DIR.
#   cluster.sh start DIR ZK_PORT TCP,HTTP,INTERSERVER[,SHARD] [...]           one per replica (shard 1 by default)
#   cluster.sh stop DIR
#   cluster.sh zk-stop DIR | zk-start DIR                                    ZooKeeper alone (faults)
#   cluster.sh replica-stop DIR N | replica-start DIR N                      replica N alone (faults)
# RUN_AS_ZK and RUN_AS_R1, RUN_AS_R2, ..., if set at start, are user ids
# ZooKeeper and each replica run as, then and at every later start (a test's
# firewall tells them apart by user).
# Each replica's state is DIR/rN (server.sh); macros: shard=its shard,
# replica=rN; cluster "events" lists every shard with its replicas. Needs clickhouse-server, java and
# zookeeper (apt-get install -y clickhouse-server zookeeper).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cmd=${1:?usage: cluster.sh start|stop|zk-start|zk-stop DIR ...}
dir=$(mkdir -p "${2:?DIR}" && cd "$2" && pwd)

zk_start() {
  local port
  port=$(cat "$dir/zk/port")
  if [ -f "$dir/zk/pid" ] && kill -0 "$(cat "$dir/zk/pid")" 2>/dev/null; then return 0; fi
  local as=()
  if [ -f "$dir/zk/uid" ]; then
    chown -R "$(cat "$dir/zk/uid"):$(cat "$dir/zk/uid")" "$dir/zk"
    as=(setpriv --reuid="$(cat "$dir/zk/uid")" --regid="$(cat "$dir/zk/uid")" --clear-groups)
  fi
  # zookeeper.jar's manifest names its dependencies in /usr/share/java.
  "${as[@]}" java -Xmx256m -Dzookeeper.log.dir="$dir/zk" -cp "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zk/zoo.cfg" >"$dir/zk/out.log" 2>&1 &
  echo $! > "$dir/zk/pid"
  # Bounded by elapsed time: each look may itself wait up to 2 s.
  local deadline=$((SECONDS + 60))
  while [ "$SECONDS" -lt "$deadline" ]; do
    if zk_serving "$port"; then return 0; fi
    kill -0 "$(cat "$dir/zk/pid")" 2>/dev/null || { echo "zookeeper exited; see $dir/zk/out.log" >&2; tail -20 "$dir/zk/out.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "zookeeper did not serve on $port within 60 s" >&2; exit 1
}

# zk_serving PORT: ZooKeeper opens its port before it serves, and closes
# the connections it takes meanwhile without a handshake (a replica that
# connects then gives up: "Cannot read all data"); its "stat" names the
# server's mode once it serves.
zk_serving() {
  local out
  out=$( (exec 3<>"/dev/tcp/127.0.0.1/$1" && printf stat >&3 && timeout 2 cat <&3) 2>/dev/null) || true
  [[ $out == *"Mode: "* ]]
}

zk_stop() {
  [ -f "$dir/zk/pid" ] || return 0
  local pid
  pid=$(cat "$dir/zk/pid")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$dir/zk/pid"
}

replica_start() {
  local ports
  read -r -a ports < "$dir/r$1/ports"
  RUN_AS=$(cat "$dir/r$1/uid" 2>/dev/null || true) CLICKHOUSE_EXTRA_CONFIG=$(cat "$dir/r$1/extra.xml") \
    "$here/server.sh" start "$dir/r$1" "${ports[0]}" "${ports[1]}"
}

case "$cmd" in
start)
  zkport=${3:?ZK_PORT}
  shift 3
  [ $# -ge 1 ] || { echo "at least one replica TCP,HTTP,INTERSERVER triple" >&2; exit 2; }
  command -v java >/dev/null 2>&1 && [ -f /usr/share/java/zookeeper.jar ] || { echo "zookeeper not found: apt-get install -y zookeeper" >&2; exit 1; }
  mkdir -p "$dir/zk/data"
  echo "$zkport" > "$dir/zk/port"
  if [ -n "${RUN_AS_ZK:-}" ]; then echo "$RUN_AS_ZK" > "$dir/zk/uid"; fi
  cat > "$dir/zk/zoo.cfg" <<CFG
tickTime=500
initLimit=10
syncLimit=5
dataDir=$dir/zk/data
clientPort=$zkport
clientPortAddress=127.0.0.1
maxClientCnxns=200
admin.enableServer=false
4lw.commands.whitelist=ruok,stat
CFG
  zk_start
  shards=""
  for sh in $(for triple in "$@"; do IFS=, read -r _ _ _ shard <<<"$triple"; echo "${shard:-1}"; done | sort -un); do
    replicas=""
    for triple in "$@"; do
      IFS=, read -r tcp _ _ shard <<<"$triple"
      [ "${shard:-1}" = "$sh" ] && replicas="$replicas<replica><host>127.0.0.1</host><port>$tcp</port></replica>"
    done
    shards="$shards<shard><internal_replication>true</internal_replication>$replicas</shard>"
  done
  echo "$@" > "$dir/replicas"
  n=0
  for triple in "$@"; do
    n=$((n + 1))
    IFS=, read -r tcp http inter shard <<<"$triple"
    mkdir -p "$dir/r$n"
    echo "$tcp $http" > "$dir/r$n/ports"
    uid_var=RUN_AS_R$n
    if [ -n "${!uid_var:-}" ]; then echo "${!uid_var}" > "$dir/r$n/uid"; fi
    echo "<interserver_http_host>127.0.0.1</interserver_http_host><interserver_http_port>$inter</interserver_http_port>
  <zookeeper><node><host>127.0.0.1</host><port>$zkport</port></node><session_timeout_ms>6000</session_timeout_ms></zookeeper>
  <macros><shard>${shard:-1}</shard><replica>r$n</replica></macros>
  <remote_servers><events>$shards</events></remote_servers>
  <distributed_ddl><path>/clickhouse/task_queue/ddl</path></distributed_ddl>" > "$dir/r$n/extra.xml"
    replica_start "$n"
  done
  ;;
replica-start) replica_start "${3:?N}" ;;
replica-stop) "$here/server.sh" stop "$dir/r${3:?N}" ;;
stop)
  for r in "$dir"/r*; do
    [ -d "$r" ] && "$here/server.sh" stop "$r"
  done
  zk_stop
  ;;
zk-stop) zk_stop ;;
zk-start) zk_start ;;
*) echo "unknown command $cmd" >&2; exit 2 ;;
esac
