#!/usr/bin/env bash
# The load generator's client on the kernel stack against the same client on our stack
# (AF_XDP), both against `wirespeed serve http --stack kernel`, alternating, 3 rounds.
# Lab: two namespaces joined by a veth (client 198.18.62.1 kernel, 198.18.62.2 ours; server
# 198.18.62.3). Client pinned to CPU 0, server to CPU 1. Run as root after a release build.
set -euo pipefail
BIN=${BIN:-target/release/wirespeed}
C=ws-cs$$c S=ws-cs$$s
cleanup() { pkill -INT -f "listen 198.18.62.3:8080" || true; ip netns del $C 2>/dev/null || true; ip netns del $S 2>/dev/null || true; }
trap cleanup EXIT
ip netns add $C; ip netns add $S
ip -n $C link add c0 type veth peer name s0 netns $S
for ns in $C $S; do ip -n $ns link set lo up; done
ip -n $C link set c0 up; ip -n $S link set s0 up
ip -n $C addr add 198.18.62.1/24 dev c0; ip -n $S addr add 198.18.62.3/24 dev s0
# A veth hands on partially checksummed frames unless tx checksum offload is off.
ip netns exec $C ethtool -K c0 tx off tso off gso off >/dev/null
ip netns exec $S ethtool -K s0 tx off tso off gso off >/dev/null
ip netns exec $S $BIN serve http --stack kernel --engine epoll --cpus 1 --listen 198.18.62.3:8080 2>/dev/null &
sleep 1
URL=http://198.18.62.3:8080/plaintext
for round in 1 2 3; do
  for stack in kernel xdp; do
    extra=(--engine epoll)
    [ $stack = xdp ] && extra=(--stack xdp --iface c0 --ip 198.18.62.2/24)
    out=$(ip netns exec $C $BIN bench http $URL -c ${CONNS:-64} -d 5s --cpus 0 "${extra[@]}" 2>/dev/null)
    rps=$(echo "$out" | awk '/reqs\/sec/ {print $2}')
    p99=$(echo "$out" | awk '/Latency/ {getline; print $3}')
    cpu=$(echo "$out" | awk '/Client CPU/ {print $7}')
    echo "round $round  client $stack  req/s $rps  p99 $p99  client us/req $cpu"
  done
done
