#!/usr/bin/env bash
# The full suite: unit, integration (privileged, in network namespaces) and bounded fuzzing.
# Exits non-zero when any part fails.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $EUID -ne 0 ]]; then
  echo "make test: the integration tests create network namespaces and load BPF; run as root (sudo make test)" >&2
  exit 1
fi

start=$(date +%s)
# Leftovers from an earlier crashed run must not break this one.
./target/release/wirespeed lab down --all >/dev/null 2>&1 || true

# Optimized tests (profile ci: release without LTO): the integration tests drive real load.
# One test at a time: many tests pin threads to CPUs or measure, and the machine has 2.
# With the DPDK feature, as `make` builds the binary: the DPDK driver's own test
# (crates/nic/tests/dpdk.rs) and `serve --stack dpdk` run too.
cargo test --profile ci --workspace --features wirespeed/dpdk,wirespeed-net/dpdk,wirespeed-nic/dpdk -- --test-threads=1

# The kernel's own forwarding selftests (tools/testing/selftests/net/forwarding), without and
# with the fast path, at the veths' defaults (router at TC) and with GRO on (router at XDP):
# a check that passes without fp and fails with it fails the suite. Reduced through their
# own settings (--quick); tests/kernel-selftests/README.md.
bash tests/kernel-selftests/run.sh --quick

# The TCP/IP stack and the packet parsers under libFuzzer: 60 s on the stack target (whole
# frames into a stack with a listener), 20 s on the wire parsers.
bash scripts/fuzz.sh 80

echo "make test: all passed in $(( $(date +%s) - start )) s"
