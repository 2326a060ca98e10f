#!/usr/bin/env bash
# Client CPU time per request: `wirespeed bench http` against wrk, same server, same run.
#
# One `pair` lab (tuned profile, so each side's packet processing stays on its own CPU), the
# wirespeed HTTP server pinned to CPU 1, each client pinned to CPU 0 with the same
# connections and duration, alternating rounds (ws wrk ws wrk ...). CPU time is the client
# process's user+sys (bash `times` for the child) over its whole run; requests are what it reports
# (no warm-up for either, so both count the same interval). Prints one line per run and the
# median (min-max) of the per-round ratios ws/wrk.
#
# usage: sudo [ENGINE=uring|epoll] crates/load/scripts/bench-vs-wrk.sh [ROUNDS=3] [DURATION_S=5] [CONNS=256]
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROUNDS=${1:-3}
DUR=${2:-5}
CONNS=${3:-256}
W=${WIRESPEED:-target/release/wirespeed}
ENGINE=${ENGINE:-uring}
LAB=bw
URL=http://198.18.0.2:8080/plaintext
command -v wrk >/dev/null || { echo "wrk is not installed (make deps)" >&2; exit 1; }

# Runs a command in the client namespace on CPU 0; prints its output, then "CPU user sys" (s).
client() {
  ( ip netns exec ws-$LAB-c taskset -c 0 "$@" 2>&1; times ) | awk '
    /^[0-9]+m[0-9.]+s [0-9]+m[0-9.]+s$/ { n++; if (n == 2) { split($1, u, /[ms]/); split($2, s, /[ms]/);
      printf "CPU %.3f %.3f\n", u[1]*60+u[2], s[1]*60+s[2] }; next } { print }'
}

cleanup() {
  [[ -n "${SRV:-}" ]] && kill -INT "$SRV" 2>/dev/null && wait "$SRV" 2>/dev/null || true
  "$W" lab down "$LAB" >/dev/null 2>&1 || true
}
trap cleanup EXIT
"$W" lab down "$LAB" >/dev/null 2>&1 || true
"$W" lab up pair --name "$LAB" --profile tuned --cpus c=0 --cpus s=1 >/dev/null
ip netns exec ws-$LAB-s "$W" serve http --stack kernel --cpus 1 --listen 198.18.0.2:8080 \
  --engine epoll --locality none 2>/dev/null &
SRV=$!
for _ in $(seq 100); do ip netns exec ws-$LAB-c curl -fs -o /dev/null $URL && break; sleep 0.05; done

echo "# $(date -u +%FT%TZ) $(uname -r) nproc=$(nproc) commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "# server: wirespeed serve http (epoll) on CPU 1; clients on CPU 0; $CONNS connections, ${DUR}s, 1 thread; ws engine $ENGINE"
ratios=()
for r in $(seq "$ROUNDS"); do
  for tool in ws wrk; do
    if [[ $tool == ws ]]; then
      out=$(client "$W" bench http $URL -c "$CONNS" --cpus 0 --warmup 0 -d "${DUR}s" --engine "$ENGINE")
      req=$(grep -oE '^ +[0-9]+ reqs in' <<<"$out" | grep -oE '[0-9]+')
    else
      out=$(client wrk -t1 -c "$CONNS" -d "${DUR}s" $URL)
      req=$(grep -oE '^ +[0-9]+ requests in' <<<"$out" | grep -oE '[0-9]+')
    fi
    read -r u s < <(grep -oE 'CPU [0-9.]+ [0-9.]+' <<<"$out" | cut -d' ' -f2-)
    us=$(awk -v u="$u" -v s="$s" -v n="$req" 'BEGIN{printf "%.3f", (u+s)*1e6/n}')
    rps=$(awk -v n="$req" -v d="$DUR" 'BEGIN{printf "%.0f", n/d}')
    printf "round %d %-3s %9s req/s  CPU user %5ss sys %5ss  %s CPU-us/req\n" "$r" "$tool" "$rps" "$u" "$s" "$us"
    eval "us_$tool=$us"
  done
  ratios+=("$(awk -v a="$us_ws" -v b="$us_wrk" 'BEGIN{printf "%.3f", a/b}')")
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{v[NR]=$1} END{m=(NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2;
  printf "ws/wrk client CPU-us per request: median %.2f (min %.2f, max %.2f) over %d rounds\n", m, v[1], v[NR], NR}'
