#!/usr/bin/env bash
# Simulated multi-node: runs one rank of a job per Linux network namespace ("host"), the namespaces
# joined by a bridge, each host's link optionally rate-limited with tc (tbf). Every rank gets
# RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (rank 0's address), PRIDE_HOSTNAME=host<i> and the
# interface for Gloo and UCX. Needs root and iproute2; exits 77 (skip) where namespaces cannot be made.
# Cleans up everything it creates, also on failure.
#
#   bash scripts/netns_run.sh [-n ranks] [-r rate] -- command [args...]
#   bash scripts/netns_run.sh -n 4 -r 1gbit -- .venv/bin/python perf/bench_vs_gloo.py --env
set -euo pipefail
N=4; RATE=""
while [ $# -gt 0 ]; do
  case "$1" in
    -n) N="$2"; shift 2 ;;
    -r) RATE="$2"; shift 2 ;;
    -h|--help) sed -n 2,10p "$0"; exit 0 ;;
    --) shift; break ;;
    *) echo "netns_run: unknown option $1 (see --help)"; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "netns_run: no command given (see --help)"; exit 2; }
PREFIX="pride$$x"; BR="${PREFIX}br"; SUBNET="10.213.$(( $$ % 200 + 20 ))"; PORT=$(( 20000 + $$ % 20000 ))

cleanup() {
  for i in $(seq 0 $((N - 1))); do ip netns del "${PREFIX}$i" 2>/dev/null || true; done
  ip link del "$BR" 2>/dev/null || true
}
trap cleanup EXIT
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || ! ip link add "$BR" type bridge 2>/dev/null; then
  echo "netns_run: cannot create network namespaces here (needs root and iproute2); skipped"
  exit 77
fi
ip link set "$BR" up
for i in $(seq 0 $((N - 1))); do
  ns="${PREFIX}$i"
  ip netns add "$ns"
  ip link add "${PREFIX}v$i" type veth peer name "${PREFIX}p$i"
  ip link set "${PREFIX}p$i" master "$BR" up
  ip link set "${PREFIX}v$i" netns "$ns"
  ip -n "$ns" addr add "$SUBNET.$((i + 1))/24" dev "${PREFIX}v$i"
  ip -n "$ns" link set "${PREFIX}v$i" up
  ip -n "$ns" link set lo up
  if [ -n "$RATE" ]; then  # both directions of the host's link
    ip netns exec "$ns" tc qdisc add dev "${PREFIX}v$i" root tbf rate "$RATE" burst 512kb latency 100ms
    tc qdisc add dev "${PREFIX}p$i" root tbf rate "$RATE" burst 512kb latency 100ms
  fi
done
echo "netns_run: $N hosts${RATE:+ at $RATE each}: $*"
pids=()
for i in $(seq 0 $((N - 1))); do
  ip netns exec "${PREFIX}$i" env RANK="$i" LOCAL_RANK=0 WORLD_SIZE="$N" LOCAL_WORLD_SIZE=1 \
    MASTER_ADDR="$SUBNET.1" MASTER_PORT="$PORT" PRIDE_HOSTNAME="host$i" GLOO_SOCKET_IFNAME="${PREFIX}v$i" \
    UCX_NET_DEVICES="${PREFIX}v$i" UCX_TLS=tcp,self "$@" &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
