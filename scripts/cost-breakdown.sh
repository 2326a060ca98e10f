#!/usr/bin/env bash
# Where the server CPU's time goes per HTTP request: the kernel stack (epoll) against our
# stack over AF_XDP (copy mode), on one veth pair. perf samples CPU 1 (the server's) with the
# cpu-clock software event; each sample's symbol is put in a category, and each category's
# share of the CPU is turned into microseconds per request with the request count of the same
# interval. Needs perf (linux-perf).
#
# With `stream`, the same for the 512-byte echo stream (4 connections, 64 messages in flight
# each): per message instead of per request.
#
#   sudo scripts/cost-breakdown.sh [SECONDS] [http|stream]
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${1:-4}
MODE=${2:-http}
BIN=${BIN:-target/release/wirespeed}
NS_S=ws-cb-srv NS_C=ws-cb-cli
[[ $EUID -eq 0 ]] || { echo "run as root" >&2; exit 1; }
command -v perf >/dev/null || { echo "perf missing: apt-get install linux-perf" >&2; exit 1; }
TMP=$(mktemp -d)
cleanup() {
  pkill -INT -f "$BIN serve" 2>/dev/null || true; sleep 0.3
  ip netns del $NS_S 2>/dev/null || true; ip netns del $NS_C 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
cleanup
TMP=$(mktemp -d)
ip netns add $NS_S; ip netns add $NS_C
ip -n $NS_C link add veth-c type veth peer name veth-s netns $NS_S
ip -n $NS_C addr add 198.18.60.1/24 dev veth-c
ip -n $NS_S addr add 198.18.60.2/24 dev veth-s
for ns in $NS_S $NS_C; do ip -n $ns link set lo up; done
ip -n $NS_C link set veth-c up; ip -n $NS_S link set veth-s up
# The same offload settings for both rows: AF_XDP needs whole, checksummed frames.
ip netns exec $NS_C ethtool -K veth-c tx off tso off gso off >/dev/null
ip netns exec $NS_S ethtool -K veth-s tx off tso off gso off >/dev/null

categorize() { # perf report lines "pct sym" -> category totals
  awk '
    function cat(s) {
      if (s ~ /wirespeed_tcpip|wirespeed_wire/) return "our TCP/IP stack";
      if (s ~ /wirespeed_nic|xsk_ring|Device>::(rx|flush|tx)/) return "AF_XDP driver (user space)";
      if (s ~ /vdso|clock_gettime|Timespec/) return "clock reads (poll loop)";
      if (s ~ /wirespeed|httparse|async_task|rust_begin|Future|core::|alloc::|std::|memmove|memcpy|memset|malloc|free/) return "runtime, HTTP, app (user space)";
      if (s ~ /xsk|xdp|bpf_prog|__dev_direct_xmit|dev_direct/) return "kernel: AF_XDP/XDP";
      if (s ~ /^(tcp_|__tcp|inet_|__inet|ip_|__ip|ipv4_|sk_|__sk|sock_|skb_|__skb|kfree_skb|consume_skb|napi|net_rx|__netif|netif|veth|dev_|__dev|nf_|raw_|udp_|process_backlog|validate_xmit|eth_|packet_|lock_sock|release_sock|bbr|__build_skb|build_skb|kmem_cache|kmalloc|__kmalloc|page_frag|__alloc_skb|alloc_skb|tcp)/) return "kernel: network stack";
      if (s ~ /^(__x64_sys|do_syscall|entry_SYSCALL|syscall_|__sys_|ep_|do_epoll|__fget|fput|fdget|import_iovec|copy_user|_copy_|rep_movs|__check_object|check_heap|__virt_addr_valid|rw_verify|security_)/) return "kernel: syscalls, epoll, copies";
      return "kernel: other";
    }
    { pct=$1; sub(/%/,"",pct); $1=""; s=$0; sub(/^ +/,"",s); t[cat(s)]+=pct }
    END { for (k in t) printf "%6.1f%%  %s\n", t[k], k }' | sort -rn
}

measure() { # kind
  local kind=$1 addr app load
  if [[ $kind == kernel ]]; then
    addr=198.18.60.2:8080
    args=(--cpus 1 --listen $addr --engine epoll)
  else
    addr=198.18.60.100:8080
    args=(--stack xdp --iface veth-s --ip 198.18.60.100/24 --cpus 1 --listen $addr)
  fi
  if [[ $MODE == stream ]]; then
    app=echo; load=(bench echo $addr --mode stream --size 512)
  else
    app=http; load=(bench http http://$addr/plaintext -c 256)
  fi
  ip netns exec $NS_S "$BIN" serve $app "${args[@]}" 2>"$TMP/$kind.log" &
  sleep 1
  ip netns exec $NS_C "$BIN" "${load[@]}" --cpus 0 --warmup 1s -d "${DUR}s" --json "$TMP/$kind.json" >/dev/null &
  local bp=$!
  sleep 1.5
  perf record -q -C 1 -e cpu-clock -F 4999 -o "$TMP/$kind.data" -- sleep $((DUR - 1)) 2>/dev/null
  wait $bp
  pkill -INT -f "$BIN serve" || true; sleep 0.5
  local rps; rps=$(grep -o '"rps": *[0-9.]*' "$TMP/$kind.json" | grep -o '[0-9.]*$')
  echo "== $kind: $(printf '%.0f' "$rps") req/s; CPU 1 busy 100% of the sampled time = $(awk -v r="$rps" 'BEGIN{printf "%.2f", 1e6/r}') us of CPU 1 per request"
  perf report -i "$TMP/$kind.data" --no-children --sort sym --stdio 2>/dev/null \
    | awk '/^ +[0-9.]+%/ {p=$1; $1=""; sub(/^ *\[[.kg]\] /,""); print p, $0}' \
    | categorize | awk -v r="$rps" '{pct=$1; sub(/%/,"",pct); us=pct/100*1e6/r; $1=""; printf "  %6.1f%%  %6.2f us/req %s\n", pct, us, $0}'
}

echo "# $MODE: server CPU 1 sampled by perf (cpu-clock, 4999 Hz) for $((DUR - 1)) s under wirespeed bench on CPU 0 (per request = per message for stream)"
measure kernel
measure xdp
