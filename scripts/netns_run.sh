#!/usr/bin/env bash
# Simulated multi-node: runs the ranks of a job in Linux network namespaces, one namespace per
# "host", the namespaces joined by a bridge, each host's link optionally rate-limited with tc (tbf).
# With -p, several ranks share a host (and its link): rank = host * P + local rank. Every rank gets
# RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (host 0's address),
# PRIDE_HOSTNAME=host<i> and the interface for Gloo and UCX. UCX may use shared memory between the
# ranks of one host (pride gives only those peers endpoints without UCX's error handling, which is
# what lets UCX pick shared memory), and TCP over the host's link to every other host.
# Needs root and iproute2; exits 77 (skip) where namespaces cannot be made. Cleans up everything it
# creates, also on failure.
#
#   bash scripts/netns_run.sh [-n hosts] [-p ranks per host] [-r rate] -- command [args...]
#   bash scripts/netns_run.sh -n 4 -r 1gbit -- .venv/bin/python perf/bench_vs_gloo.py --env
#   bash scripts/netns_run.sh -n 2 -p 2 -- build/py/perf/collectives/sign_allreduce_perf -c 1 -a all
set -euo pipefail
N=4; P=1; RATE=""
while [ $# -gt 0 ]; do
  case "$1" in
    -n|-p|-r) [ $# -ge 2 ] || { echo "netns_run: $1 needs a value (see --help)"; exit 2; }
       case "$1" in -n) N="$2" ;; -p) P="$2" ;; -r) RATE="$2" ;; esac; shift 2 ;;
    -h|--help) sed -n 2,14p "$0"; exit 0 ;;
    --) shift; break ;;
    *) echo "netns_run: unknown option $1 (see --help)"; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "netns_run: no command given (see --help)"; exit 2; }
[[ "$N" =~ ^[1-9][0-9]*$ && "$P" =~ ^[1-9][0-9]*$ ]] || { echo "netns_run: -n and -p take positive integers"; exit 2; }
[ "$N" -le 200 ] || { echo "netns_run: at most 200 hosts (one /24 subnet)"; exit 2; }
# tc's rate syntax (a number, then bit, kbit, mbit, gbit or tbit, or the same in bytes: bps, kbps, ...),
# checked here so that a typo does not surface as tc's "illegal value" after the namespaces are made.
[ -z "$RATE" ] || [[ "$RATE" =~ ^[0-9]+(\.[0-9]+)?([kKmMgGtT]i?)?(bit|bps)$ ]] ||
  { echo "netns_run: -r takes a tc rate such as 1gbit, 200mbit or 500kbit, not '$RATE'"; exit 2; }
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
echo "netns_run: $N hosts x $P ranks${RATE:+, each host link at $RATE}: $*"
# Shared memory only where a host has several ranks; with one rank per host UCX sees TCP alone.
TLS=tcp,self; [ "$P" -gt 1 ] && TLS=tcp,self,sm
pids=()
# Ctrl-C or a kill of this script stops the ranks too: as background jobs of a script they ignore
# SIGINT, and would run on (and hold the namespaces) after the script had gone. TERM first, then KILL.
stop_ranks() {
  trap - INT TERM
  echo "netns_run: $1: stopping the ranks" >&2
  kill -TERM "${pids[@]}" 2>/dev/null || true
  for _ in $(seq 50); do
    kill -0 "${pids[@]}" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  exit "$2"  # cleanup (the EXIT trap) removes the namespaces
}
trap 'stop_ranks SIGINT 130' INT
trap 'stop_ranks SIGTERM 143' TERM
for i in $(seq 0 $((N - 1))); do
  for j in $(seq 0 $((P - 1))); do
    ip netns exec "${PREFIX}$i" env RANK="$((i * P + j))" LOCAL_RANK="$j" WORLD_SIZE="$((N * P))" \
      LOCAL_WORLD_SIZE="$P" MASTER_ADDR="$SUBNET.1" MASTER_PORT="$PORT" PRIDE_HOSTNAME="host$i" \
      GLOO_SOCKET_IFNAME="${PREFIX}v$i" UCX_NET_DEVICES="${PREFIX}v$i" UCX_TLS="$TLS" "$@" &
    pids+=($!)
  done
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
