#!/usr/bin/env python3
"""Where the forwarding core's time goes, Linux against the fast path, for one fp_bench row.

Runs `fp_bench SECS 1 ROW` under `perf record -a` (cpu-clock; no hardware counters needed;
all CPUs, so that the side-band events of programs loaded on CPU 0 are recorded), reads CPU 1's
samples, finds the seconds of the veth and the "on the DUT" measurements (the latter: the generator
gen_rx on CPU 1; with fp_xdp samples the fast path, without them Linux), and prints each one's
ns per packet split into coarse buckets: per-symbol shares times the measured ns per packet.

    sudo scripts/fp_profile.py [ROW] [SECS]     # defaults: "router (50" 6

ROW must pick out exactly one fp_bench row (a veth and an on-the-DUT line).

Run from the repository root, as root, after
`cargo build --release -p wirespeed-fp-lab --example fp_bench`.
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

ROW = sys.argv[1] if len(sys.argv) > 1 else "router (50"
SECS = sys.argv[2] if len(sys.argv) > 2 else "6"
BENCH = "target/release/examples/fp_bench"

# First match wins; order matters (sink and generator symbols before the generic ones).
BUCKETS = [
    # perf -g: on CPU 1 these are page_pool_put_unrefed_netmem returning the generator's
    # pages into its pool's ring, against CPU 0 returning the frames veth refused.
    ("spin locks (returning the generator's pages to its page pool)",
     r"spin_lock|spin_unlock"),
    ("generator (gen_rx, test-run loop, page and skb set-up)",
     r"gen_rx|test_run|bpf_test|page_pool_alloc|page_pool_refill|xdp_recv_frames|"
     r"__xdp_build_skb|build_skb|kmem_cache_alloc_bulk|napi_skb_cache|xdp_init_buff"),
    ("veth receive and the sink (sink_drop, returning pages or skbs)",
     r"sink_drop|veth_xdp_rcv|veth_poll|page_pool_put|page_pool_return|__xdp_return|"
     r"xdp_return_frame|net_rx_action|handle_softirqs|__napi_poll|"
     r"napi_complete|xdp_do_flush|bq_xmit_all|__local_bh_enable|skb_free_head|kfree_skb|"
     r"__slab_free|kmem_cache_free|skb_release|napi_consume|__netif_receive_skb_core|"
     r"skb_pp_recycle|napi_pp_put"),
    ("kernel FIB lookup", r"fib_|ip_mtu_from_fib|dev_get_by_index|find_exception"),
    ("the fast-path program (fp_xdp)", r"fp_xdp|^0xffffffffc0"),
    ("redirect and veth transmit (devmap, bulk queue, veth_xdp_xmit)",
     r"redirect|dev_map|bq_enqueue|dev_hash_map|veth_xdp_xmit|map_id_range"),
]
REST = "IP stack, bridge and the rest"


def main():
    data = tempfile.mktemp(suffix=".perf")
    print(f"fp_profile: perf record -a -- {BENCH} {SECS} 1 {ROW}", file=sys.stderr)
    run = subprocess.run(
        ["perf", "record", "-q", "-a", "-o", data, "--", BENCH, SECS, "1", ROW],
        capture_output=True, text=True, check=True)
    rows = [l for l in run.stdout.splitlines() if l.startswith("| ") and ROW in l]
    if len(rows) != 2:
        sys.exit(f"fp_profile: want one veth and one on-the-DUT '{ROW}' row:\n{run.stdout}")
    try:
        report_methods(data, rows)
    finally:
        os.remove(data)


def report_methods(data, rows):
    script = subprocess.run(["perf", "script", "-i", data, "-C", "1", "-F", "time,ip,sym"],
                            capture_output=True, text=True).stdout
    per_sec = collections.defaultdict(collections.Counter)
    for line in script.splitlines():
        p = line.split()
        if len(p) < 3:
            continue
        sym = p[2]
        sec = int(float(p[0].rstrip(":")))
        per_sec[sec]["all"] += 1
        if "gen_rx" in sym:
            per_sec[sec]["gen"] += 1
        if "fp_xdp" in sym:
            per_sec[sec]["fp"] += 1
    # The bench runs the veth measurements first (generator on CPU 0: no gen_rx on CPU 1),
    # then the on-the-DUT ones (gen_rx on CPU 1); a busy second is one or the other.
    for method, row, on_dut in (("veth", rows[0], False), ("on the DUT", rows[1], True)):
        cells = [c.strip() for c in row.strip("|").split("|")]
        pps = {"Linux": float(cells[1]) * 1e6, "fast path": float(cells[2]) * 1e6}
        windows = {"Linux": [], "fast path": []}
        for sec, c in sorted(per_sec.items()):
            if (c["gen"] > 0) != on_dut or c["all"] < 1000:
                continue
            windows["fast path" if c["fp"] > 0.02 * c["all"] else "Linux"].append(sec)
        print(f"{ROW}: {method}, forwarding core CPU 1")
        for who in ("Linux", "fast path"):
            report_window(data, who, windows[who][1:-1], pps[who])  # edges: set-up, hand-over


def report_window(data, who, secs, pps):
    if not secs:
        print(f"{who}: no clean window found")
        return
    report = subprocess.run(
        ["perf", "report", "-i", data, "--cpu", "1", "--time", f"{secs[0]},{secs[-1] + 1}",
         "--no-children", "--sort", "sym", "-g", "none", "--percent-limit", "0"],
        capture_output=True, text=True).stdout
    shares = collections.Counter()
    rest = []
    for line in report.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+\[\S+\]\s+(\S+)", line)
        if not m:
            continue
        pct, sym = float(m.group(1)), m.group(2)
        for name, rx in BUCKETS:
            if re.search(rx, sym):
                shares[name] += pct
                break
        else:
            shares[REST] += pct
            rest.append((pct, sym))
    ns = 1e9 / pps
    print(f"{who}: {ns:.0f} ns/packet ({pps / 1e6:.3f} Mpps), {len(secs)} s of samples")
    for name, pct in shares.most_common():
        print(f"  {name}: {pct:.1f}% = {pct * ns / 100:.0f} ns")
    top = ", ".join(f"{s} {p:.1f}%" for p, s in sorted(rest, reverse=True)[:6])
    print(f"  largest of the rest: {top}")


if __name__ == "__main__":
    main()
