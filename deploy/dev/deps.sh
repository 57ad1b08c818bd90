#!/usr/bin/env bash
# Installs what the stack needs on Debian 12 when it is missing: ClickHouse
# from Debian's apt (the package does not start it) and curl. NATS comes from
# the Go module (built by `make build`), so its version always matches go.mod.
set -euo pipefail
need=()
command -v clickhouse-server >/dev/null 2>&1 || need+=(clickhouse-server clickhouse-client)
command -v curl >/dev/null 2>&1 || need+=(curl)
# `deps.sh test`: also what the browser test drives (Debian's chromium) and
# the replicated storage test's ZooKeeper, and what the C SDK's tests build
# and run with (sdk/c/DEPS).
if [ "${1:-}" = test ]; then
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  [ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
  for c in gcc clang valgrind make pkg-config; do
    command -v $c >/dev/null 2>&1 || need+=($c)
  done
  # `make partition` cuts loopback traffic between NATS nodes with nft.
  [ -n "${PARTITION:-}" ] && ! command -v nft >/dev/null 2>&1 && need+=(nftables)
  [ -f /usr/include/x86_64-linux-gnu/curl/curl.h ] || [ -f /usr/include/curl/curl.h ] || need+=(libcurl4-openssl-dev)
fi
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
    echo "missing ${need[*]}: run as root, or: apt-get install -y ${need[*]}" >&2; exit 1
  fi
fi
echo "installing ${need[*]} from apt" >&2
${SUDO:-} apt-get update -qq
DEBIAN_FRONTEND=noninteractive ${SUDO:-} apt-get install -y -qq "${need[@]}" >/dev/null
