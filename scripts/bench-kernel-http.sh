#!/usr/bin/env bash
# HTTP plaintext on the kernel stack, side by side in one run on one lab:
# wirespeed (epoll), wirespeed (io_uring) and nginx (1 worker, access_log off), each measured
# by the same client (wrk), 256 connections, no pipelining, server on CPU 1, client on CPU 0.
# Rounds alternate (A B C A B C ...). Prints req/s and server CPU-µs per request for each
# round, then medians and ratios against nginx. Writes results/bench-kernel-http.json.
#
#   sudo scripts/bench-kernel-http.sh [ROUNDS] [DURATION_S]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
DUR=${2:-5}
CONNS=256
SERVER_CPU=1
CLIENT_CPU=0
BIN=${BIN:-target/release/wirespeed}
NS_S=ws-bk-srv NS_C=ws-bk-cli
ADDR=198.18.10.2 PORT=8080

[[ $EUID -eq 0 ]] || { echo "run as root (network namespaces)" >&2; exit 1; }
command -v wrk >/dev/null || { echo "wrk missing: run make deps" >&2; exit 1; }
[[ -x $BIN ]] || { echo "$BIN missing: run cargo build --release" >&2; exit 1; }

cleanup() {
  [[ -n ${SPID:-} ]] && kill -INT "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null || true
  ip netns del $NS_S 2>/dev/null || true
  ip netns del $NS_C 2>/dev/null || true
  rm -rf "${TMP:-/nonexistent}"
}
trap cleanup EXIT
cleanup
TMP=$(mktemp -d)
mkdir -p results

ip netns add $NS_S; ip netns add $NS_C
ip -n $NS_C link add veth-c type veth peer name veth-s netns $NS_S
ip -n $NS_C addr add 198.18.10.1/24 dev veth-c
ip -n $NS_S addr add $ADDR/24 dev veth-s
for ns in $NS_S $NS_C; do ip -n $ns link set lo up; done
ip -n $NS_C link set veth-c up; ip -n $NS_S link set veth-s up

cat > "$TMP/nginx.conf" <<NGINX
worker_processes 1;
daemon off;
pid $TMP/nginx.pid;
error_log $TMP/nginx-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 100000000;
  server {
    listen $ADDR:$PORT reuseport;
    location = /plaintext { default_type text/plain; return 200 "Hello, World!"; }
  }
}
NGINX

start_server() {
  case $1 in
    epoll|uring)
      ip netns exec $NS_S "$BIN" serve http --cpus $SERVER_CPU --listen $ADDR:$PORT --engine "$1" 2>"$TMP/serve.log" &
      SPID=$! ;;
    nginx)
      ip netns exec $NS_S taskset -c $SERVER_CPU nginx -c "$TMP/nginx.conf" &
      SPID=$! ;;
  esac
  for _ in $(seq 100); do
    ip netns exec $NS_C bash -c "exec 3<>/dev/tcp/$ADDR/$PORT" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "server $1 did not come up" >&2; cat "$TMP/serve.log" >&2 || true; exit 1
}

# CPU time of every process in the server's tree (nginx forks its worker), in ns.
server_cpu_ns() {
  local total=0 pid
  for pid in $SPID $(pgrep -P "$SPID" 2>/dev/null); do
    for t in /proc/$pid/task/*/schedstat; do
      [[ -r $t ]] && total=$((total + $(cut -d' ' -f1 "$t")))
    done
  done
  echo $total
}
# busy (non-idle) jiffies of a CPU
busy_ticks() { awk -v c="cpu$1" '$1==c {print $2+$3+$4+$7+$8+$9}' /proc/stat; }
# softirq time on the server CPU, in ns (USER_HZ ticks).
softirq_ns() { awk -v c="cpu$SERVER_CPU" '$1==c {printf "%.0f\n", $8 * 10000000}' /proc/stat; }

measure() { # $1 = server kind; prints "rps cpu_us_per_req client_busy_pct"
  start_server "$1"
  ip netns exec $NS_C taskset -c $CLIENT_CPU wrk -t1 -c$CONNS -d1s "http://$ADDR:$PORT/plaintext" >/dev/null  # warm-up
  local c0 s0 c1 s1 b0 b1 out rps reqs
  c0=$(server_cpu_ns); s0=$(softirq_ns); b0=$(busy_ticks $CLIENT_CPU)
  out=$(ip netns exec $NS_C taskset -c $CLIENT_CPU wrk -t1 -c$CONNS -d${DUR}s "http://$ADDR:$PORT/plaintext")
  c1=$(server_cpu_ns); s1=$(softirq_ns); b1=$(busy_ticks $CLIENT_CPU)
  kill -INT "$SPID" 2>/dev/null || true; wait "$SPID" 2>/dev/null || true; SPID=
  [[ $1 == nginx ]] && { kill "$(cat "$TMP/nginx.pid" 2>/dev/null)" 2>/dev/null || true; sleep 0.2; }
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  reqs=$(awk '/requests in/ {print $1}' <<<"$out")
  if grep -q "Non-2xx\|Socket errors" <<<"$out"; then echo "warning: $1 had errors: $(grep -E 'Non-2xx|Socket errors' <<<"$out")" >&2; fi
  awk -v r="$rps" -v n="$reqs" -v c=$((c1 - c0)) -v s=$((s1 - s0)) -v b=$((b1 - b0)) -v d="$DUR" \
    'BEGIN {printf "%.0f %.2f %.0f\n", r, (c + s) / 1000 / n, b / d}'
}

KINDS=(epoll uring nginx)
command -v nginx >/dev/null || { echo "nginx not installed: skipping that peer" >&2; KINDS=(epoll uring); }
declare -A RPS CPU CLI
echo "# HTTP plaintext, $CONNS connections, no pipelining, server CPU $SERVER_CPU, client (wrk -t1) CPU $CLIENT_CPU, ${DUR}s after 1s warm-up"
printf "%-6s %-6s %12s %14s %12s\n" round server req/s cpu-us/req client-cpu%
for r in $(seq "$ROUNDS"); do
  for k in "${KINDS[@]}"; do
    read -r rps cpu cli < <(measure "$k")
    RPS[$k]+="$rps "; CPU[$k]+="$cpu "; CLI[$k]+="$cli "
    printf "%-6s %-6s %12s %14s %12s\n" "$r" "$k" "$rps" "$cpu" "$cli"
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo
printf "%-6s %12s %14s\n" server "median req/s" "median cpu-us/req"
json="{\"connections\":$CONNS,\"duration_s\":$DUR,\"rounds\":$ROUNDS,\"server_cpu\":$SERVER_CPU,\"client_cpu\":$CLIENT_CPU,\"kernel\":\"$(uname -r)\",\"rows\":["
sep=
for k in "${KINDS[@]}"; do
  mr=$(median <<<"${RPS[$k]}"); mc=$(median <<<"${CPU[$k]}")
  printf "%-6s %12s %14s\n" "$k" "$mr" "$mc"
  json+="$sep{\"server\":\"$k\",\"rps\":[${RPS[$k]// /,}],\"cpu_us_per_req\":[${CPU[$k]// /,}],\"client_cpu_pct\":[${CLI[$k]// /,}],\"median_rps\":$mr,\"median_cpu_us_per_req\":$mc}"
  sep=,
done
json="${json//,]/]}]}"
echo "client-cpu% is CPU $CLIENT_CPU busy time (wrk plus the softirq work the veth puts there); near 100 means the"
echo "row measures the client as much as the server."
if [[ " ${KINDS[*]} " == *" nginx "* ]]; then
  echo
  echo "pairwise ratios against nginx (same round): median [min, max]"
  for k in epoll uring; do
    ratios=$(paste <(tr ' ' '\n' <<<"${RPS[$k]}") <(tr ' ' '\n' <<<"${RPS[nginx]}") | awk 'NF==2 && $2>0 {printf "%.3f ", $1/$2}')
    printf "  %-6s req/s x%s  [%s, %s]\n" "$k" "$(median <<<"$ratios")" "$(tr ' ' '\n' <<<"$ratios" | grep -v '^$' | sort -g | head -1)" "$(tr ' ' '\n' <<<"$ratios" | grep -v '^$' | sort -g | tail -1)"
  done
fi
echo "$json" > results/bench-kernel-http.json
echo "wrote results/bench-kernel-http.json"
