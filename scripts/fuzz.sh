#!/usr/bin/env bash
# Bounded fuzzing of the packet parsers and the TCP/IP stack (cargo-fuzz / libFuzzer).
#
#   scripts/fuzz.sh [SECONDS]      (default 60; 3/4 of it on the stack target, 1/4 on wire)
#
# Installs cargo-fuzz if missing. Uses the nightly toolchain when one is installed, else
# stable with RUSTC_BOOTSTRAP=1 (cargo-fuzz needs -Z sanitizer flags). Exits non-zero when a
# target crashes; the crashing input is left in fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."

total=${1:-60}
if ! [[ "$total" =~ ^[0-9]+$ ]] || (( total < 4 )); then
  echo "usage: $0 [SECONDS>=4]" >&2
  exit 2
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz.sh: installing cargo-fuzz" >&2
  cargo install cargo-fuzz --locked
fi

fuzz=(cargo fuzz)
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  fuzz=(cargo +nightly fuzz)
else
  echo "fuzz.sh: no nightly toolchain; using stable with RUSTC_BOOTSTRAP=1" >&2
  export RUSTC_BOOTSTRAP=1
fi

run() { # target seconds
  local target=$1 secs=$2
  mkdir -p "fuzz/corpus/$target"
  echo "fuzz.sh: $target for ${secs}s" >&2
  # -rss_limit_mb guards the shared machine; -print_final_stats gives execs/s for the docs.
  (cd fuzz && "${fuzz[@]}" run "$target" "corpus/$target" "seeds/$target" -- \
      -max_total_time="$secs" -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1)
}

stack_secs=$(( total * 3 / 4 ))
run stack "$stack_secs"
run wire $(( total - stack_secs ))
echo "fuzz.sh: no crash in ${total}s" >&2
