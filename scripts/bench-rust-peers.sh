#!/usr/bin/env bash
# HTTP plaintext against the thread-per-core Rust runtimes, side by side in one run on one lab:
# wirespeed (epoll), wirespeed (io_uring), monoio 0.2.4, may_minihttp 0.1.11, nginx (1 worker)
# and, where it comes up, wirespeed on the bypass stack (AF_XDP). Every server has one thread
# on CPU 1; one client (wrk -t1, 256 connections) on CPU 0. Two modes: no pipelining, and
# pipelining 16 requests per write (TechEmpower's pipeline.lua). Rounds alternate the servers.
# Prints req/s, server CPU-µs per request (the server CPU's busy time) and client CPU% per
# round, then per mode each server's median CPU-µs/req and its same-round ratio to wirespeed
# epoll and io_uring (docs/BENCHMARKS.md, "Rust runtimes side by side"). Writes
# results/bench-rust-peers.json.
#
# The peers are built outside the workspace, each its own Cargo project under
# target/rust-peers/<name>/ (release, fat LTO, one codegen unit, panic=abort).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat <<EOF
usage: sudo scripts/bench-rust-peers.sh [ROUNDS] [DURATION_S]
       sudo scripts/bench-rust-peers.sh --profile MODE [DURATION_S]
       sudo scripts/bench-rust-peers.sh --count MODE [DURATION_S]
       scripts/bench-rust-peers.sh --build-only

  ROUNDS      rounds per mode, each server once per round (default 5)
  DURATION_S  seconds each measurement runs, after a 1 s warm-up (default 5)
  --build-only  build the monoio and may_minihttp servers under target/rust-peers/ and stop
  --profile MODE  no table: for each server, \`perf record -C 1 -e cpu-clock -g\` over
                DURATION_S (default 5) of MODE load (plain or pipelined), then its share of
                samples in the kernel and in user space and its top symbols; the data goes
                to results/perf-rust-peers/SERVER-MODE.data
  --count MODE  no table: for each server, \`perf stat\` over one DURATION_S run of MODE load,
                and per request: the syscalls and context switches of the server's CPU, and
                the io_uring SQEs, CQEs and task-work items, the TCP segments the
                client sent and received, and the IPIs each CPU took (counts, not times:
                they hold on a noisy host)

Environment: BIN (wirespeed binary, default target/release/wirespeed), XDP=0 skips the
bypass stack row, CANDIDATE=PATH adds a second wirespeed binary's engines as rows cand-epoll
and cand-uring (an A/B of a change, paired round by round with BIN's), PEERS=0 leaves out
monoio, may_minihttp and nginx (a shorter A/B, so more rounds fit), STEER=1 has each veth's
received packets processed on its own side's CPU (RPS), as on two hosts: without it a veth
runs the receiver's TCP on the sender's CPU, so CPU 1 carries the client's receive of every
response and CPU 0 the server's receive of every request. Needs root (network
namespaces), wrk, cargo (crates.io reachable for the
first build); nginx is optional.
EOF
}

BUILD_ONLY=0
PROFILE=
COUNT=
case ${1:-} in
  -h|--help) usage; exit 0 ;;
  --build-only) BUILD_ONLY=1 ;;
  --profile)
    PROFILE=${2:-}
    [[ $PROFILE == plain || $PROFILE == pipelined ]] || { echo "--profile takes plain or pipelined" >&2; exit 2; }
    shift 2; set -- 1 "${1:-5}" ;;
  --count)
    COUNT=${2:-}
    [[ $COUNT == plain || $COUNT == pipelined ]] || { echo "--count takes plain or pipelined" >&2; exit 2; }
    shift 2; set -- 1 "${1:-5}" ;;
esac
ROUNDS=${1:-5}
DUR=${2:-5}
[[ $BUILD_ONLY == 1 ]] || [[ $ROUNDS =~ ^[1-9][0-9]*$ && $DUR =~ ^[1-9][0-9]*$ ]] || { usage >&2; exit 2; }
CONNS=256
DEPTH=16
SERVER_CPU=1
CLIENT_CPU=0
BIN=${BIN:-target/release/wirespeed}
CANDIDATE=${CANDIDATE:-}
PEER_DIR=target/rust-peers
NS_S=ws-rp-srv NS_C=ws-rp-cli
CLIENT_IP=198.18.10.1 ADDR=198.18.10.2 XDP_ADDR=198.18.10.3 PORT=8080

command -v cargo >/dev/null || { echo "cargo missing: install Rust (https://rustup.rs), or keep cargo on root's PATH (sudo env PATH=\$PATH ...)" >&2; exit 1; }

# monoio's own benchmark server's shape: a raw TcpListener, read into a buffer, one fixed
# response per complete request (a pipelined batch gets one answer per request).
write_monoio() {
  local dir=$PEER_DIR/monoio
  mkdir -p "$dir/src"
  cat > "$dir/Cargo.toml" <<'EOF'
[package]
name = "monoio-plaintext"
version = "0.1.0"
edition = "2021"

[dependencies]
monoio = "=0.2.4"

[profile.release]
lto = "fat"
codegen-units = 1
panic = "abort"

[workspace]
EOF
  cat > "$dir/src/main.rs" <<'EOF'
//! HTTP plaintext on monoio: one runtime thread, one fixed response per complete request.
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::{TcpListener, TcpStream};

const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nServer: monoio\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!";

fn main() {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "0.0.0.0:8080".into());
    let driver = if monoio::utils::detect_uring() { "io_uring" } else { "epoll" };
    eprintln!("monoio ({driver}) listening on {addr}");
    let mut rt = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
        .with_entries(32768)
        .build()
        .expect("monoio runtime");
    rt.block_on(async move {
        let listener = TcpListener::bind(addr.as_str()).expect("bind");
        loop {
            if let Ok((stream, _)) = listener.accept().await {
                monoio::spawn(serve(stream));
            }
        }
    });
}

async fn serve(mut stream: TcpStream) -> std::io::Result<()> {
    let mut rbuf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut pending: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut out: Vec<u8> = Vec::with_capacity(16 * 1024);
    loop {
        let (res, buf) = stream.read(rbuf).await;
        rbuf = buf;
        let n = res?;
        if n == 0 {
            return Ok(());
        }
        pending.extend_from_slice(&rbuf[..n]);
        let mut start = 0;
        while let Some(end) = pending[start..].windows(4).position(|w| w == b"\r\n\r\n") {
            out.extend_from_slice(RESPONSE);
            start += end + 4;
        }
        pending.drain(..start);
        if !out.is_empty() {
            let (res, buf) = stream.write_all(out).await;
            out = buf;
            out.clear();
            res?;
        }
    }
}
EOF
}

# may_minihttp as its TechEmpower entry runs it: HttpServer(service).start(addr), /plaintext.
write_may_minihttp() {
  local dir=$PEER_DIR/may_minihttp
  mkdir -p "$dir/src"
  cat > "$dir/Cargo.toml" <<'EOF'
[package]
name = "may-minihttp-plaintext"
version = "0.1.0"
edition = "2021"

[dependencies]
may = "0.3"
may_minihttp = "=0.1.11"

[profile.release]
lto = "fat"
codegen-units = 1
panic = "abort"

[workspace]
EOF
  cat > "$dir/src/main.rs" <<'EOF'
//! HTTP plaintext on may_minihttp: one worker thread, TechEmpower's /plaintext.
use may_minihttp::{HttpServer, HttpService, Request, Response};
use std::io;

#[derive(Clone)]
struct Techempower;

impl HttpService for Techempower {
    fn call(&mut self, req: Request, rsp: &mut Response) -> io::Result<()> {
        match req.path() {
            "/plaintext" => {
                rsp.header("Content-Type: text/plain").body("Hello, World!");
            }
            _ => {
                rsp.status_code(404, "Not Found");
            }
        }
        Ok(())
    }
}

fn main() {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "0.0.0.0:8080".into());
    may::config().set_workers(1).set_pool_capacity(1000).set_stack_size(0x1000);
    eprintln!("may_minihttp listening on {addr}");
    let server = HttpServer(Techempower).start(addr.as_str()).expect("bind");
    server.join().expect("server");
}
EOF
}

build_peers() {
  write_monoio
  write_may_minihttp
  local p
  for p in monoio may_minihttp; do
    echo "building $p (release, fat LTO) in $PEER_DIR/$p" >&2
    (cd "$PEER_DIR/$p" && CARGO_TARGET_DIR=target cargo build --release --quiet) ||
      { echo "building $p failed (crates.io reachable? cargo fetch in $PEER_DIR/$p)" >&2; exit 1; }
  done
}
peer_bin() { # $1 = peer name
  case $1 in
    monoio) echo "$PEER_DIR/monoio/target/release/monoio-plaintext" ;;
    may_minihttp) echo "$PEER_DIR/may_minihttp/target/release/may-minihttp-plaintext" ;;
  esac
}

if [[ $BUILD_ONLY == 1 ]]; then build_peers; exit 0; fi
[[ $EUID -eq 0 ]] || { echo "run as root (network namespaces)" >&2; exit 1; }
command -v wrk >/dev/null || { echo "wrk missing: install it (apt install wrk, or make deps)" >&2; exit 1; }
[[ -x $BIN ]] || { echo "$BIN missing: run cargo build --release -p wirespeed" >&2; exit 1; }
build_peers

cleanup() {
  stop_server
  # a measurement runs in a subshell, so its server may be unknown here: end what the lab holds
  local pids
  pids=$(ip netns pids $NS_S 2>/dev/null || true)
  [[ -z $pids ]] || { kill -KILL $pids 2>/dev/null || true; sleep 0.2; }
  ip netns del $NS_S 2>/dev/null || true
  ip netns del $NS_C 2>/dev/null || true
  rm -rf "${TMP:-/nonexistent}"
}
stop_server() {
  [[ -n ${SPID:-} ]] || return 0
  kill -INT "$SPID" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.05; done
  kill -KILL "$SPID" 2>/dev/null || true
  wait "$SPID" 2>/dev/null || true
  [[ -s ${TMP:-/nonexistent}/nginx.pid ]] && { kill "$(cat "$TMP/nginx.pid")" 2>/dev/null || true; rm -f "$TMP/nginx.pid"; sleep 0.2; }
  SPID=
}
trap cleanup EXIT
trap 'exit 130' INT TERM
SPID=
cleanup
TMP=$(mktemp -d)
mkdir -p results

ip netns add $NS_S; ip netns add $NS_C
ip -n $NS_C link add veth-c type veth peer name veth-s netns $NS_S
ip -n $NS_C addr add $CLIENT_IP/24 dev veth-c
ip -n $NS_S addr add $ADDR/24 dev veth-s
for ns in $NS_S $NS_C; do ip -n $ns link set lo up; done
ip -n $NS_C link set veth-c up; ip -n $NS_S link set veth-s up
# STEER=1: RPS on each veth's one receive queue, to its own side's CPU (the masks live in the
# lab's devices and go with them).
STEER=${STEER:-0}
if [[ $STEER == 1 ]]; then
  ip netns exec $NS_C sh -c "printf %x $((1 << CLIENT_CPU)) > /sys/class/net/veth-c/queues/rx-0/rps_cpus"
  ip netns exec $NS_S sh -c "printf %x $((1 << SERVER_CPU)) > /sys/class/net/veth-s/queues/rx-0/rps_cpus"
fi

# The load must go only into the lab: each server address has to route out of the client
# namespace's veth, on its own subnet (no gateway), before wrk is pointed at it.
check_lab_route() { # $1 = address
  local r
  r=$(ip -n $NS_C -4 route get "$1" 2>/dev/null) || { echo "no route to $1 in $NS_C: not loading it" >&2; exit 1; }
  [[ $r == *" dev veth-c "* && $r != *" via "* ]] ||
    { echo "$1 does not route into the lab ($r): not loading it" >&2; exit 1; }
}
check_lab_route $ADDR
check_lab_route $XDP_ADDR

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

# TechEmpower's pipeline.lua: every write carries DEPTH requests.
cat > "$TMP/pipeline.lua" <<'LUA'
init = function(args)
  local r = {}
  local depth = tonumber(args[1]) or 1
  for i = 1, depth do
    r[i] = wrk.format()
  end
  req = table.concat(r)
end

request = function()
  return req
end
LUA

server_addr() { if [[ $1 == ws-xdp ]]; then echo $XDP_ADDR; else echo $ADDR; fi; }

start_server() { # $1 = server kind
  local pin=(ip netns exec $NS_S taskset -c $SERVER_CPU)
  case $1 in
    ws-epoll|ws-uring)
      "${pin[@]}" "$BIN" serve http --cpus $SERVER_CPU --listen $ADDR:$PORT --engine "${1#ws-}" 2>"$TMP/serve.log" & ;;
    cand-epoll|cand-uring)
      "${pin[@]}" "$CANDIDATE" serve http --cpus $SERVER_CPU --listen $ADDR:$PORT --engine "${1#cand-}" 2>"$TMP/serve.log" & ;;
    ws-xdp)
      "${pin[@]}" "$BIN" serve http --stack xdp --iface veth-s --ip $XDP_ADDR/24 --idle-sleep-us 20 \
        --cpus $SERVER_CPU --listen $XDP_ADDR:$PORT 2>"$TMP/serve.log" & ;;
    monoio|may_minihttp)
      "${pin[@]}" "$(peer_bin "$1")" $ADDR:$PORT 2>"$TMP/serve.log" & ;;
    nginx)
      "${pin[@]}" nginx -c "$TMP/nginx.conf" 2>"$TMP/serve.log" & ;;
  esac
  SPID=$!
  local addr; addr=$(server_addr "$1")
  for _ in $(seq 100); do
    ip netns exec $NS_C bash -c "exec 3<>/dev/tcp/$addr/$PORT" 2>/dev/null && return 0
    kill -0 "$SPID" 2>/dev/null || break
    sleep 0.05
  done
  echo "server $1 did not come up:" >&2; cat "$TMP/serve.log" >&2 || true
  stop_server
  return 1
}

# CPU time of every thread in the server's process tree (nginx forks its worker), in ns.
server_cpu_ns() {
  local total=0 pid t
  for pid in $SPID $(pgrep -P "$SPID" 2>/dev/null); do
    for t in /proc/$pid/task/*/schedstat; do
      [[ -r $t ]] && total=$((total + $(cut -d' ' -f1 "$t" 2>/dev/null || echo 0)))
    done
  done
  echo $total
}
# busy (non-idle) jiffies of a CPU
busy_ticks() { awk -v c="cpu$1" '$1==c {print $2+$3+$4+$7+$8+$9}' /proc/stat; }
# Idle (and iowait) time of the server CPU, in ns: measured at idle entry and exit under
# NO_HZ, not sampled by the tick, so wall time less it is the CPU's busy time.
CLK_TCK=$(getconf CLK_TCK)
idle_ns() { awk -v c="cpu$SERVER_CPU" -v hz="$CLK_TCK" '$1==c {printf "%.0f\n", ($5 + $6) * 1e9 / hz}' /proc/stat; }

wrk_argv() { # $1 = mode, $2 = seconds, $3 = address; sets WRK_ARGV
  WRK_ARGV=(ip netns exec $NS_C taskset -c $CLIENT_CPU wrk -t1 -c$CONNS -d"$2"s)
  [[ $1 == pipelined ]] && WRK_ARGV+=(-s "$TMP/pipeline.lua")
  WRK_ARGV+=("http://$3:$PORT/plaintext" -- $DEPTH)
}

run_wrk() { # $1 = mode, $2 = seconds, $3 = address
  wrk_argv "$@"
  "${WRK_ARGV[@]}"
}

measure() { # $1 = mode, $2 = server kind; prints "rps cpu_us_per_req task_us_per_req client_busy_pct"
  local addr; addr=$(server_addr "$2")
  start_server "$2" || return 1
  run_wrk "$1" 1 "$addr" >/dev/null  # warm-up
  local w0 i0 t0 b0 w1 i1 t1 b1 out rps reqs
  w0=$(date +%s%N); i0=$(idle_ns); t0=$(server_cpu_ns); b0=$(busy_ticks $CLIENT_CPU)
  out=$(run_wrk "$1" "$DUR" "$addr")
  w1=$(date +%s%N); i1=$(idle_ns); t1=$(server_cpu_ns); b1=$(busy_ticks $CLIENT_CPU)
  stop_server
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  reqs=$(awk '/requests in/ {print $1}' <<<"$out")
  if grep -q "Non-2xx\|Socket errors" <<<"$out"; then
    echo "warning: $2 ($1) had errors: $(grep -E 'Non-2xx|Socket errors' <<<"$out" | tr -s ' \n' ' ')" >&2
  fi
  [[ ${reqs:-0} -gt 0 ]] || { echo "warning: $2 ($1) answered no request" >&2; return 1; }
  # The figure is CPU 1's busy time, all of which the server causes (its threads, and the
  # softirq its sends raise, where the client's TCP receive runs; with STEER=1 instead the
  # softirq of its own TCP receive, which RPS brings there). Its threads' schedstat
  # time is printed beside it: without IRQ_TIME_ACCOUNTING it already holds the softirq run
  # in their context, so adding CPU 1's softirq to it would count that twice.
  awk -v r="$rps" -v n="$reqs" -v busy=$(( (w1 - w0) - (i1 - i0) )) -v task=$((t1 - t0)) -v b=$((b1 - b0)) -v d="$DUR" \
    'BEGIN {printf "%.0f %.2f %.2f %.0f\n", r, busy / 1000 / n, task / 1000 / n, b / d}'
}

KINDS=(ws-epoll ws-uring)
[[ ${PEERS:-1} == 0 ]] || KINDS+=(monoio may_minihttp)
if [[ -n $CANDIDATE ]]; then
  [[ -x $CANDIDATE ]] || { echo "CANDIDATE=$CANDIDATE is not an executable wirespeed binary" >&2; exit 1; }
  KINDS+=(cand-epoll cand-uring)
fi
if [[ ${PEERS:-1} == 0 ]]; then :
elif command -v nginx >/dev/null; then KINDS+=(nginx)
else echo "nginx not installed (apt install nginx): skipping that peer" >&2; fi
# The bypass row: wirespeed's own stack on an AF_XDP socket of the server's veth, at its own
# address. Kept only if it comes up and answers in a trial here.
if [[ ${XDP:-1} != 0 ]]; then
  if start_server ws-xdp 2>"$TMP/xdp-trial.log" && run_wrk plain 1 $XDP_ADDR >"$TMP/xdp-wrk.log" 2>&1 &&
     grep -q "requests in" "$TMP/xdp-wrk.log" && ! grep -q "Non-2xx\|Socket errors" "$TMP/xdp-wrk.log"; then
    KINDS+=(ws-xdp)
  else
    echo "bypass stack (--stack xdp) skipped: it did not serve on this veth: $(tr -s '\n' ' ' <"$TMP/xdp-trial.log" | cut -c1-200)" >&2
  fi
  stop_server
fi

# One perf profile of the server's CPU per server under MODE's load: where its CPU goes,
# kernel against user space, and the top symbols (docs/BENCHMARKS.md, "Rust runtimes side by
# side").
profile() { # $1 = mode, $2 = server kind
  local addr data; addr=$(server_addr "$2"); data=results/perf-rust-peers/$2-$1.data
  start_server "$2" || return 1
  run_wrk "$1" 1 "$addr" >/dev/null  # warm-up
  run_wrk "$1" $((DUR + 2)) "$addr" >"$TMP/wrk.log" &
  local wpid=$!
  sleep 1
  perf record -q -C $SERVER_CPU -e cpu-clock -g -o "$data" -- sleep "$DUR" 2>/dev/null
  wait $wpid
  stop_server
  echo
  echo "## $2, $1: $(awk '/Requests\/sec/ {print $2}' "$TMP/wrk.log") req/s; perf report -i $data"
  perf report -i "$data" --stdio --no-children --sort dso -g none 2>/dev/null | awk '/%/ && !/^#/ {printf "  %s %s\n", $1, $2}' | head -6
  perf report -i "$data" --stdio --no-children --sort dso,sym -g none --percent-limit 1.5 2>/dev/null |
    awk '/%/ && !/^#/ {$2=""; print "   " $0}' | head -25
}
# Kernel events per request under MODE's load, counted over exactly one wrk run: the server
# CPU's syscalls and context switches (a sleep and a wake-up are two), and the io_uring
# events of every CPU (task work is queued where the packet arrived, the client's CPU).
COUNT_EVENTS=raw_syscalls:sys_enter,sched:sched_switch,io_uring:io_uring_submit_req,io_uring:io_uring_complete,io_uring:io_uring_task_add
count() { # $1 = mode, $2 = server kind
  local addr; addr=$(server_addr "$2")
  start_server "$2" || return 1
  run_wrk "$1" 1 "$addr" >/dev/null  # warm-up
  wrk_argv "$1" "$DUR" "$addr"
  client_tcp_segs >"$TMP/segs0"; cpu_ipis >"$TMP/ipis0"
  perf stat -a -A -x, -o "$TMP/stat.csv" -e "$COUNT_EVENTS" -- "${WRK_ARGV[@]}" >"$TMP/wrk.log"
  client_tcp_segs >"$TMP/segs1"; cpu_ipis >"$TMP/ipis1"
  stop_server
  local reqs; reqs=$(awk '/requests in/ {print $1}' "$TMP/wrk.log")
  [[ ${reqs:-0} -gt 0 ]] || { echo "warning: $2 ($1) answered no request" >&2; return 1; }
  local segs; segs=$(paste "$TMP/segs0" "$TMP/segs1" | awk '{printf "%d %d", $3 - $1, $4 - $2}')
  segs+=" $(paste "$TMP/ipis0" "$TMP/ipis1" | awk '{printf "%d %d", $3 - $1, $4 - $2}')"
  awk -F, -v k="$2" -v n="$reqs" -v cpu="CPU$SERVER_CPU" -v segs="$segs" '
    $1 ~ /^CPU/ && $2 ~ /^[0-9]+$/ {
      ev = $4; sub(/.*:/, "", ev)
      if (ev == "sys_enter" || ev == "sched_switch") { if ($1 == cpu) c[ev] += $2 } else c[ev] += $2
    }
    END { split(segs, s, " ")
      printf "%-14s %10d %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f\n", k, n, c["sys_enter"] / n,
      c["sched_switch"] / n, c["io_uring_submit_req"] / n, c["io_uring_complete"] / n,
      c["io_uring_task_add"] / n, s[1] / n, s[2] / n, s[3] / n, s[4] / n }' "$TMP/stat.csv"
}
# Interrupts between CPUs (function-call and rescheduling IPIs) the client's and the server's
# CPU took: RPS (STEER=1) and cross-CPU wake-ups send them, and in a VM each send is an exit.
cpu_ipis() {
  awk -v a=$((CLIENT_CPU + 2)) -v b=$((SERVER_CPU + 2)) '$1 == "CAL:" || $1 == "RES:" {x += $a; y += $b} END {print x, y}' /proc/interrupts
}
# The client namespace's TCP segment counters, out and in (RFC 4022 tcpOutSegs, tcpInSegs):
# what crossed the veth for every server alike, the bypass stack's included. The kernel
# counts a GSO packet as its segments when sending and as one when receiving it whole.
client_tcp_segs() {
  ip netns exec $NS_C awk '$1 == "Tcp:" && $2 ~ /^[0-9]/ {print $12, $11}' /proc/net/snmp
}
if [[ -n $COUNT ]]; then
  command -v perf >/dev/null || { echo "perf missing: apt install linux-perf" >&2; exit 1; }
  perf stat -a -e "$COUNT_EVENTS" -- true >/dev/null 2>&1 ||
    { echo "perf cannot count $COUNT_EVENTS here: run as root, with tracefs mounted and a kernel with io_uring tracepoints" >&2; exit 1; }
  echo "# perf stat over one ${DUR}s wrk run of $COUNT load per server; per request:"
  echo "# syscalls and context switches on CPU $SERVER_CPU, io_uring SQEs, CQEs and task-work items on all CPUs,"
  echo "# the TCP segments the client sent (requests and ACKs) and received (a GSO packet counts once),"
  echo "# and the IPIs (function-call and rescheduling) CPU $CLIENT_CPU and CPU $SERVER_CPU took"
  printf "%-14s %10s %9s %9s %9s %9s %9s %9s %9s %9s %9s\n" server requests syscalls switches sqes cqes taskwork cli_out cli_in ipi_cli ipi_srv
  for k in "${KINDS[@]}"; do count "$COUNT" "$k"; done
  exit 0
fi
if [[ -n $PROFILE ]]; then
  command -v perf >/dev/null || { echo "perf missing: apt install linux-perf" >&2; exit 1; }
  mkdir -p results/perf-rust-peers
  echo "# perf record -C $SERVER_CPU -e cpu-clock -g, ${DUR}s of $PROFILE load per server: samples by object, then symbols over 1.5%"
  for k in "${KINDS[@]}"; do profile "$PROFILE" "$k"; done
  exit 0
fi

declare -A RPS CPU TASK CLI
MODES=(plain pipelined)
echo "# HTTP plaintext, $CONNS connections, server CPU $SERVER_CPU (one thread), client (wrk -t1) CPU $CLIENT_CPU, ${DUR}s after 1s warm-up"
echo "# servers: ${KINDS[*]}"
[[ $STEER == 1 ]] && echo "# STEER=1: each side's received packets processed on its own CPU (RPS on both veths)"
for mode in "${MODES[@]}"; do
  echo
  if [[ $mode == plain ]]; then echo "## non-pipelined"; else echo "## pipelined x$DEPTH"; fi
  printf "%-6s %-13s %12s %14s %14s %12s\n" round server req/s cpu-us/req task-us/req client-cpu%
  for r in $(seq "$ROUNDS"); do
    for k in "${KINDS[@]}"; do
      if read -r rps cpu task cli < <(measure "$mode" "$k"); then :; else rps=0 cpu=nan task=nan cli=0; fi
      RPS[$mode:$k]+="$rps "; CPU[$mode:$k]+="$cpu "; TASK[$mode:$k]+="$task "; CLI[$mode:$k]+="$cli "
      printf "%-6s %-13s %12s %14s %14s %12s\n" "$r" "$k" "$rps" "$cpu" "$task" "$cli"
    done
  done
done

median() { tr ' ' '\n' | grep -v '^$\|nan' | sort -g | awk '{a[NR]=$1} END {if (!NR) print "nan"; else print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# same-round ratios of CPU-µs/req, "median (min-max)"; $1 $2 = the two lists
paired() {
  local ratios
  ratios=$(paste <(tr ' ' '\n' <<<"$1") <(tr ' ' '\n' <<<"$2") | awk 'NF==2 && $1!="nan" && $2!="nan" && $2>0 {printf "%.3f ", $1/$2}')
  [[ -n $ratios ]] || { echo "n/a"; return; }
  printf "%.2fx (%.2f-%.2f)" "$(median <<<"$ratios")" \
    "$(tr ' ' '\n' <<<"$ratios" | grep -v '^$' | sort -g | head -1)" "$(tr ' ' '\n' <<<"$ratios" | grep -v '^$' | sort -g | tail -1)"
}

echo
echo "server CPU-µs per request (CPU $SERVER_CPU's busy time; task-us/req: the server's threads alone): median over rounds, and the median"
echo "[min-max] over rounds of the same-round ratio to wirespeed epoll and to wirespeed io_uring"
echo
echo "| server | non-pipelined µs/req | vs ws-epoll | vs ws-uring | pipelined ×$DEPTH µs/req | vs ws-epoll | vs ws-uring |"
echo "|---|---:|---:|---:|---:|---:|---:|"
json="{\"steer\":$STEER,\"connections\":$CONNS,\"pipeline_depth\":$DEPTH,\"duration_s\":$DUR,\"rounds\":$ROUNDS,\"server_cpu\":$SERVER_CPU,\"client_cpu\":$CLIENT_CPU,\"kernel\":\"$(uname -r)\",\"rows\":["
sep=
for k in "${KINDS[@]}"; do
  line="| $k"
  json+="$sep{\"server\":\"$k\""
  for mode in "${MODES[@]}"; do
    mc=$(median <<<"${CPU[$mode:$k]}"); mr=$(median <<<"${RPS[$mode:$k]}")
    ve=$(paired "${CPU[$mode:$k]}" "${CPU[$mode:ws-epoll]}"); vu=$(paired "${CPU[$mode:$k]}" "${CPU[$mode:ws-uring]}")
    line+=" | $mc | $ve | $vu"
    json+=",\"$mode\":{\"rps\":[${RPS[$mode:$k]// /,}],\"cpu_us_per_req\":[${CPU[$mode:$k]// /,}],\"task_us_per_req\":[${TASK[$mode:$k]// /,}],\"client_cpu_pct\":[${CLI[$mode:$k]// /,}],\"median_rps\":$mr,\"median_cpu_us_per_req\":$mc,\"vs_ws_epoll\":\"$ve\",\"vs_ws_uring\":\"$vu\"}"
  done
  echo "$line |"
  json+="}"
  sep=,
done
json="${json//,]/]}]}"
json="${json//nan/null}"
echo
echo "client-cpu% is CPU $CLIENT_CPU busy time (wrk plus the softirq work the veth puts there); near 100"
echo "means the row measures the client as much as the server."
echo "$json" > results/bench-rust-peers.json
echo "wrote results/bench-rust-peers.json"
