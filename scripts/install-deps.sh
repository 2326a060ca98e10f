#!/usr/bin/env bash
# Installs what wirespeed needs on Debian 12, as root. Idempotent: installs only what is missing.
set -euo pipefail

PKGS=(
  clang llvm libelf-dev zlib1g-dev pkg-config libbpf-dev bpftool   # BPF programs and loaders
  iproute2 iputils-ping ethtool nftables iptables ipset tcpdump     # lab and fast path
  curl wrk nginx netcat-openbsd strace sysstat procps                # peers and independent counters
  redis-server redis-tools                                           # load balancer lab backends and clients
  librsvg2-bin                                                       # rsvg-convert: the showdown's PNG charts
  libdpdk-dev                                                        # DPDK driver (feature)
  dpkg-dev python3-jsonschema python3-yaml                           # make deb; the manifest schema check
  prometheus                                                         # scrapes --metrics in the lab test; promtool
  netsniff-ng jq bc smcroute traceroute                              # the kernel's forwarding selftests (mausezahn)
  exabgp frr                                                         # lb_bgp_lab, lab up lb-cluster: ExaBGP or FRR (zebra, bgpd, bfdd) as a node's speaker; FRR as the router
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done

if ((${#missing[@]})); then
  if [[ $EUID -ne 0 ]]; then
    echo "install-deps: missing packages (${missing[*]}); run as root: sudo make deps" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # Packages such as prometheus start their service on install; the suite starts its own
  # instances, so nothing is started here (policy-rc.d 101: "action not allowed").
  policy_rc=/usr/sbin/policy-rc.d
  own_policy=0
  if [[ ! -e $policy_rc ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy_rc" && chmod 755 "$policy_rc" && own_policy=1
  fi
  status=0
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || status=$?
  if ((own_policy)); then rm -f "$policy_rc"; fi
  if ((status)); then exit "$status"; fi
fi

# nginx and redis-server are peers that we start ourselves; the packaged services must not hold
# ports 80 and 6379. Nor may a packaged prometheus run host-wide: the lab test starts its own,
# with a generated config and temporary storage. The selftests start their own smcrouted, and
# lb_bgp_lab its own exabgp and FRR daemons.
for svc in nginx redis-server prometheus smcroute exabgp frr; do
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$svc" 2>/dev/null; then
    systemctl stop "$svc" || true
    systemctl disable "$svc" >/dev/null 2>&1 || true
  fi
done

command -v cargo >/dev/null || { echo "install-deps: cargo not found; install the Rust toolchain (rustup)" >&2; exit 1; }
