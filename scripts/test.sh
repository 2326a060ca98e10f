#!/usr/bin/env bash
# The full suite: unit, integration (privileged, in network namespaces) and bounded fuzzing.
# Exits non-zero when any part fails.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $EUID -ne 0 ]]; then
  echo "make test: the integration tests create network namespaces; run as root (sudo make test)" >&2
  exit 1
fi

# Leftovers from an earlier crashed run must not break this one.
./target/release/wirespeed lab down --all >/dev/null 2>&1 || true

# Optimized tests (profile ci: release without LTO): the integration tests drive real load.
cargo test --profile ci --workspace -- --test-threads=1
