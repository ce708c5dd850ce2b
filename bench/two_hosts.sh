#!/usr/bin/env bash
# bench/two_hosts.sh [SESSIONS] [BALANCER_PORT]: the load bench through a room of 2 hosts x 1 replica sharing
# one Redis, the hosts being network namespaces on this machine (as tests/room/test_room_hosts.py builds them;
# root needed). Host A runs Redis and a replica, host B a replica, HAProxy in the root namespace on
# 127.0.0.1. Then bench/workshop_load.py with SESSIONS protocol learners (default 60), the replicas'
# peak memory each and Redis's. Uses the real model from $TPE_CACHE_DIR (each host gets its own cache
# folder, the weights linked). Everything is removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
SESSIONS="${1:-60}"; PORT="${2:-8790}"
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 2; }
TAG=$$; PREFIX="10.251.$((TAG % 250))"; BR="tpebr$TAG"; A="tpe${TAG}a"; B="tpe${TAG}b"
WORK="$(mktemp -d)"; pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -- -"$p" 2>/dev/null || true; done
  sleep 2
  for p in "${pids[@]}"; do kill -9 -- -"$p" 2>/dev/null || true; done
  ip netns del "$A" 2>/dev/null || true; ip netns del "$B" 2>/dev/null || true; ip link del "$BR" 2>/dev/null || true
}
trap cleanup EXIT INT TERM
ip link add "$BR" type bridge; ip addr add "$PREFIX.1/24" dev "$BR"; ip link set "$BR" up
n=2
for ns in "$A" "$B"; do
  ip netns add "$ns"; ip link add "${ns}0" type veth peer name "${ns}1"; ip link set "${ns}1" netns "$ns"
  ip link set "${ns}0" master "$BR" up
  ip netns exec "$ns" ip addr add "$PREFIX.$n/24" dev "${ns}1"; ip netns exec "$ns" ip link set "${ns}1" up
  ip netns exec "$ns" ip link set lo up; n=$((n + 1))
done
for h in a b; do
  mkdir -p "$WORK/cache-$h"
  for e in "${TPE_CACHE_DIR:?set TPE_CACHE_DIR to a cache with the converted weights}"/*/; do
    ln -s "$(cd "$e" && pwd)" "$WORK/cache-$h/$(basename "$e")"
  done
done
ROOM_STORE_DIR="$WORK/store" setsid ip netns exec "$A" bash run.sh room-store "$PREFIX.2" > "$WORK/store.out" 2>&1 &
pids+=($!)
until [ -s "$WORK/store/store.url" ]; do sleep 0.5; done
for h in a b; do
  ns="$A"; addr="$PREFIX.2"; [ "$h" = b ] && { ns="$B"; addr="$PREFIX.3"; }
  ROOM_ADDRESS="$addr" ROOM_LOGS="$WORK/logs-$h" TPE_CACHE_DIR="$WORK/cache-$h" \
    setsid ip netns exec "$ns" bash run.sh room-host 1 8601 --store "@$WORK/store/store.url" > "$WORK/$h.out" 2>&1 &
  pids+=($!)
  echo "$addr:8601" >> "$WORK/hosts.txt"
done
ROOM_BALANCER_CFG="$WORK/haproxy.cfg" setsid bash run.sh room-balancer "$WORK/hosts.txt" "$PORT" > "$WORK/balancer.out" 2>&1 &
pids+=($!)
for addr in "$PREFIX.2" "$PREFIX.3"; do
  until curl -sf "http://$addr:8601/_stcore/health" >/dev/null; do sleep 1; done
done
sleep 6  # two good health checks put both replicas in the balancer (rise 2, every 2 s)
replica_pids="$(pgrep -f "streamlit run app.py --server.port 8601 --server.address $PREFIX" | paste -sd,)"
redis_pid="$(pgrep -f "redis-server $PREFIX.2" | head -1 || true)"
[ -n "$redis_pid" ] || redis_pid="$(pgrep -f "redis-server.*$WORK" | head -1 || true)"
echo "replicas (pids $replica_pids) healthy; warming up (default request, scenarios) for 60 s"
sleep 60
.venv/bin/python bench/workshop_load.py --url "http://127.0.0.1:$PORT" --sessions "$SESSIONS" --browsers 0 \
  --pid "$replica_pids" || true
URL="$(cat "$WORK/store/store.url")"
.venv/bin/python - "$URL" "$redis_pid" <<'EOF'
import sys, redis
info = redis.Redis.from_url(sys.argv[1]).info()
rss = open(f"/proc/{sys.argv[2]}/status").read().split("VmHWM:")[1].split()[0] if sys.argv[2] else None
print(f"  Redis: {info.get('db0', {}).get('keys', 0)} keys, used_memory_peak {info['used_memory_peak'] / 2**20:.1f} MB"
      + (f", peak RSS {int(rss) / 1024:.0f} MB" if rss else ""))
EOF
for h in a b; do echo "  model runs of a page on host $h: $(grep -c 'of kind trace' "$WORK"/logs-$h/*.log || true)"; done
