#!/usr/bin/env bash
# Runs the Linux kernel's own forwarding selftests (tools/testing/selftests/net/forwarding,
# kept verbatim under forwarding/ and net/, see README.md) without `wirespeed fp` and with
# it, and reports every check that passes without fp and fails with it (a DIVERGENCE).
#
#   sudo tests/kernel-selftests/run.sh [--quick] [--tests a,b] [--modes m1,m2] [--json]
#
# Everything runs inside network namespaces named ws-ksft-*, which are removed at the end
# (and on failure). Exit status: 0 no divergence, 1 divergences, 2 the runner could not run.
set -u -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

ALL_TESTS="router.sh router_multipath.sh router_mpath_nh.sh router_broadcast.sh
	ip6_forward_instats_vrf.sh custom_multipath_hash.sh bridge_vlan_unaware.sh
	bridge_port_isolation.sh bridge_sticky_fdb.sh"
# The baseline is nofp (always run with an fp mode). nofp-gro, the kernel alone with GRO on
# at every veth end, is the baseline of the -gro modes where it was run.
ALL_MODES="nofp fp-router fp-all nofp-gro fp-router-gro fp-all-gro"
# --quick: the router at TC and at XDP.
QUICK_MODES="nofp fp-router fp-router-gro"
ROUTER_NS=ws-ksft-router
# Kept files the selftests source (copied, addresses rewritten, into a scratch tree).
KEPT_FORWARDING="lib.sh tc_common.sh router_mpath_nh_lib.sh forwarding.config.sample"

usage()
{
	cat <<-EOF
	usage: $0 [options]
	  --tests a,b        selftests to run (default: all: $(echo $ALL_TESTS | tr ' ' ','))
	  --modes m1,m2      modes (default: all: ${ALL_MODES// /,}; "all" for all); nofp, the
	                     baseline, is added when missing (nofp-gro, where run, is the -gro ones')
	  --quick            the slow selftests reduced through their own settings, and the
	                     modes ${QUICK_MODES// /,} unless --modes is given (about 6 minutes)
	  --json             print a machine-readable summary on stdout (progress goes to stderr)
	  --wirespeed PATH   the binary (default: \$WIRESPEED or $REPO/target/release/wirespeed)
	  --timeout S        wall-clock limit of one selftest run (default 600, quick 150)
	  --workdir DIR      scratch and logs (default /tmp/ksft-work)
	  -h, --help
	modes: nofp          the kernel alone
	       fp-router     wirespeed fp run in the router namespace (veth defaults: router at TC)
	       fp-all        fp in every namespace (router and hosts)
	       nofp-gro      the kernel alone, GRO on at every veth end
	       fp-router-gro fp-router with GRO on at every veth end (router at XDP)
	       fp-all-gro    fp-all with GRO on at every veth end
	EOF
}

TESTS_SEL=""
MODES_SEL=""
QUICK=0
JSON=0
WIRESPEED=${WIRESPEED:-$REPO/target/release/wirespeed}
RUN_TIMEOUT=""
WORKDIR=/tmp/ksft-work

while (($#)); do
	case $1 in
	--tests) TESTS_SEL=$2; shift 2 ;;
	--tests=*) TESTS_SEL=${1#*=}; shift ;;
	--modes) MODES_SEL=$2; shift 2 ;;
	--modes=*) MODES_SEL=${1#*=}; shift ;;
	--quick) QUICK=1; shift ;;
	--json) JSON=1; shift ;;
	--wirespeed) WIRESPEED=$2; shift 2 ;;
	--timeout) RUN_TIMEOUT=$2; shift 2 ;;
	--workdir) WORKDIR=$2; shift 2 ;;
	-h|--help) usage; exit 0 ;;
	*) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
	esac
done

say()
{
	echo "$*" >&2
}

die()
{
	say "kernel-selftests: $*"
	exit 2
}

[[ $EUID -eq 0 ]] || die "needs root (network namespaces, BPF)"
[[ -z $RUN_TIMEOUT ]] && { ((QUICK)) && RUN_TIMEOUT=150 || RUN_TIMEOUT=600; }

# Selected tests and modes.
TESTS=()
if [[ -n $TESTS_SEL ]]; then
	for t in ${TESTS_SEL//,/ }; do
		[[ $t == *.sh ]] || t=$t.sh
		[[ " $(echo $ALL_TESTS) " == *" $t "* ]] || die "unknown selftest $t (known: $(echo $ALL_TESTS))"
		TESTS+=("$t")
	done
else
	TESTS=($ALL_TESTS)
fi

MODES=()
if [[ -n $MODES_SEL ]]; then
	want_modes=$MODES_SEL
elif ((QUICK)); then
	want_modes=$QUICK_MODES
else
	want_modes=$ALL_MODES
fi
[[ $want_modes == all ]] && want_modes=$ALL_MODES
for m in ${want_modes//,/ }; do
	[[ " $ALL_MODES " == *" $m "* ]] || die "unknown mode $m (known: $ALL_MODES)"
done
for m in $ALL_MODES; do
	sel=0
	for w in ${want_modes//,/ }; do
		[[ $w == "$m" ]] && sel=1
		[[ $w == fp-* && $m == nofp ]] && sel=1
	done
	((sel)) && MODES+=("$m")
done

needs_fp=0
for m in "${MODES[@]}"; do
	[[ $m == fp-* ]] && needs_fp=1
done
if ((needs_fp)); then
	[[ -x $WIRESPEED ]] || die "no wirespeed binary at $WIRESPEED (build it, or --wirespeed PATH)"
fi
for c in ip tc bridge jq ethtool mausezahn bc setsid timeout sysctl; do
	command -v "$c" >/dev/null || die "$c is missing (apt-get install -y iproute2 jq ethtool netsniff-ng bc util-linux procps)"
done

# The kept files are the kernel's, verbatim.
(cd "$HERE" && sha256sum --quiet -c SHA256SUMS) >&2 ||
	die "the kept selftest files differ from SHA256SUMS (they must stay verbatim)"

# One run at a time: each removes every ws-ksft-* namespace.
{ exec 9>/run/lock/ws-ksft.lock; } 2>/dev/null || exec 9>/tmp/ws-ksft.lock
flock -n 9 || die "another run.sh is running (lock /run/lock/ws-ksft.lock)"

mkdir -p "$WORKDIR" || die "cannot make $WORKDIR"
RESULTS=$WORKDIR/results-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RESULTS"
: > "$RESULTS/checks.tsv"
: > "$RESULTS/runs.tsv"

# --quick: the selftests' own knobs (forwarding.config / environment; TESTS picks their
# test functions).
quick_config()
{
	local t=$1
	cat <<-EOF
	WAIT_TIME=2
	PING_COUNT=5
	# a ping that must fail waits this long
	PING_TIMEOUT=2
	# omit_on_slow: router_mpath_nh.sh's 16-bit 255:65535 runs (3 x 65536 flows each)
	KSFT_MACHINE_SLOW=yes
	# bridge learning_test sleeps ageing_time + 10 s (at 1 s the entry it checks ages out)
	LOW_AGEING_TIME=300
	EOF
}

quick_tests()
{
	case $1 in
	# the NH stats checks (6 x 2 s sampling, twice per family) and the 16-bit weights
	router_mpath_nh.sh) echo "ping_ipv4 ping_ipv6 multipath_test ping_ipv4_blackhole ping_ipv6_blackhole" ;;
	# custom_hash sends 16384 pings for its flow-label check alone
	custom_multipath_hash.sh) echo "ping_ipv4 ping_ipv6" ;;
	*) echo "" ;;
	esac
}

################################################################################
# Namespaces

ns_list()
{
	ip netns list 2>/dev/null | awk '{print $1}' | grep '^ws-ksft-' || true
}

# The processes still inside our namespaces (a selftest's mausezahn or smcrouted after a
# timeout) are ended by pid, then the namespaces removed.
ns_teardown()
{
	local ns pid any=0
	for ns in $(ns_list); do
		for pid in $(ip netns pids "$ns" 2>/dev/null); do
			kill -TERM "$pid" 2>/dev/null && any=1
		done
	done
	((any)) && sleep 0.5
	for ns in $(ns_list); do
		for pid in $(ip netns pids "$ns" 2>/dev/null); do
			kill -KILL "$pid" 2>/dev/null
		done
		ip netns del "$ns" 2>/dev/null
	done
}

# fp's final status (its counters) is kept, then it is ended by its pid.
fp_stop_all()
{
	local dir=$1 f pid i tag
	for f in "$dir"/fp-*.pid; do
		[[ -f $f ]] || continue
		pid=$(cat "$f")
		[[ $pid =~ ^[0-9]+$ ]] || continue
		kill -0 "$pid" 2>/dev/null || continue
		tag=$(basename "$f" .pid)
		tag=${tag#fp-}
		if [[ ! -f $dir/fp-$tag.final.json ]] && ns_list | grep -qx "$tag"; then
			ip netns exec "$tag" "$WIRESPEED" fp status --json \
				>"$dir/fp-$tag.final.json" 2>/dev/null
		fi
		kill -TERM "$pid" 2>/dev/null || continue
		for ((i = 0; i < 50; ++i)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null
	done
}

CUR_RUNDIR=""
on_exit()
{
	[[ -n $CUR_RUNDIR ]] && fp_stop_all "$CUR_RUNDIR"
	ns_teardown
}
trap on_exit EXIT
trap 'say "interrupted"; exit 2' INT TERM

if [[ -n $(ns_list) ]]; then
	say "removing leftover namespaces: $(ns_list | tr '\n' ' ')"
	ns_teardown
fi

################################################################################
# The scratch copy: kept files, documentation addresses rewritten into the lab's

# 192.0.2.0/24 -> 198.18.2.0/24, 198.51.100.0/24 -> 198.19.100.0/24,
# 198.51.200.0/24 -> 198.19.200.0/24 (router_broadcast.sh), 203.0.113.0/24 -> 198.19.113.0/24,
# 2001:db8::/32 -> fd00:db8::/32, 2001:1::/32 -> fd01:1::/32 (ip6_forward_instats_vrf.sh).
# Link-local (169.254/16, fe80::/10), multicast (225.1.2.3, 239.0.0.1, ff0e::3), class E
# (240.0.0.1) and 255.255.255.255 stay: they never leave a link and are what the checks test.
rewrite_addresses()
{
	sed -E -i \
		-e 's/(^|[^0-9.])192\.0\.2\./\1198.18.2./g' \
		-e 's/(^|[^0-9.])198\.51\.100\./\1198.19.100./g' \
		-e 's/(^|[^0-9.])198\.51\.200\./\1198.19.200./g' \
		-e 's/(^|[^0-9.])203\.0\.113\./\1198.19.113./g' \
		-e 's/(^|[^0-9a-fA-F:])2001:db8:/\1fd00:db8:/g' \
		-e 's/(^|[^0-9a-fA-F:])2001:1:/\1fd01:1:/g' \
		"$@"
}

prepare_scratch()
{
	local t=$1 mode=$2 dir=$3 fwd=$3/net/forwarding f left
	rm -rf "$dir/net"
	mkdir -p "$fwd" "$dir/run"
	cp "$HERE/net/lib.sh" "$dir/net/lib.sh"
	for f in $KEPT_FORWARDING "$t"; do
		cp "$HERE/forwarding/$f" "$fwd/$f"
	done
	rewrite_addresses "$dir/net/lib.sh" "$fwd"/*
	left=$(grep -nE '(^|[^0-9.])(192\.0\.2|198\.51|203\.0\.113)\.|(^|[^0-9a-fA-F:])2001:' \
		"$dir/net/lib.sh" "$fwd"/* || true)
	[[ -z $left ]] || { say "addresses left outside the lab ranges:"; say "$left"; return 1; }

	{
		echo "# Generated by tests/kernel-selftests/run.sh for $t, mode $mode."
		cat "$HERE/forwarding/forwarding.config.sample"
		echo
		echo "PAUSE_ON_FAIL=no"
		echo "PAUSE_ON_CLEANUP=no"
		((QUICK)) && quick_config "$t"
		cat <<-'EOF'

		# Load the VRF-to-namespace shim right after forwarding/lib.sh has defined its
		# functions: a RETURN trap fires as each sourced file returns; lib.sh is done once
		# tests_run exists.
		__ws_ksft_shim_hook()
		{
			if [[ -z ${WS_KSFT_SHIM_LOADED-} ]] && declare -F tests_run >/dev/null; then
				WS_KSFT_SHIM_LOADED=1
				trap - RETURN
				source "$WS_KSFT_SHIM"
			fi
		}
		trap __ws_ksft_shim_hook RETURN
		EOF
	} > "$fwd/forwarding.config"
}

################################################################################
# One selftest in one mode

mode_fp()
{
	case $1 in
	fp-router*) echo router ;;
	fp-all*) echo all ;;
	*) echo none ;;
	esac
}

mode_gro()
{
	[[ $1 == *-gro ]] && echo yes || echo no
}

hooks_of()
{
	jq -r '[.ports[] | select(.name != "wsksink") | .hook | sub(" \\(ingress\\)"; "")
		| sub("xdp \\(native\\)"; "xdp") | sub("xdp \\(generic\\)"; "xdp-generic")]
		| group_by(.) | map("\(.[0])*\(length)") | join("+")' "$1" 2>/dev/null
}

# "router:tc*2 vrf-h1:xdp*1 fast=N passed=M": the hooks of the selftest's ports once fp had
# attached them and settled (">..." what they were after the checks, where that differs),
# and the packets fp forwarded itself or passed to Linux during the checks.
fp_summary()
{
	local rundir=$1 f fin ns hooks out="" fast=0 passed=0 n
	for f in "$rundir"/fp-*.status.json; do
		[[ -f $f ]] || continue
		ns=$(basename "$f" .status.json)
		ns=${ns#fp-}
		fin=$rundir/fp-$ns.final.json
		ns=${ns#ws-ksft-}
		ns=${ns#ns-}
		hooks=$(hooks_of "$f")
		if [[ -f $fin ]] && [[ $(hooks_of "$fin") != "$hooks" ]]; then
			hooks+=">$(hooks_of "$fin")"
		fi
		out+="${out:+ }$ns:${hooks:-none}"
		if [[ -f $fin ]]; then
			n=$(jq '[.ports[].fast_pathed] | add // 0' "$fin" 2>/dev/null) && fast=$((fast + n))
			n=$(jq '[.ports[].passed] | add // 0' "$fin" 2>/dev/null) && passed=$((passed + n))
		fi
	done
	[[ -n $out ]] && out+=" fast=$fast passed=$passed"
	echo "$out"
}

# TEST lines -> checks.tsv rows: test, mode, check (repeated names get " #n"), result, detail
parse_output()
{
	local t=$1 mode=$2 log=$3
	awk -v t="$t" -v m="$mode" '
	function flush() {
		if (name != "") {
			gsub(/\t/, " ", detail)
			print t "\t" m "\t" name "\t" res "\t" detail
		}
		name = ""; detail = ""
	}
	/^TEST: / {
		flush()
		line = substr($0, 7)
		sub(/[ \t]+$/, "", line)
		p = 0
		for (i = length(line) - 2; i > 0; i--)
			if (substr(line, i, 3) == "  [") { p = i; break }
		if (p > 0 && substr(line, length(line)) == "]") {
			res = substr(line, p + 3, length(line) - p - 3)
			gsub(/ /, "", res)
			n = substr(line, 1, p - 1)
		} else {
			res = "?"; n = line
		}
		sub(/[ \t]+$/, "", n)
		seen[n]++
		name = (seen[n] > 1) ? n " #" seen[n] : n
		next
	}
	name != "" && /^\t/ { d = $0; sub(/^\t+/, "", d); detail = detail (detail == "" ? "" : "; ") d; next }
	name != "" && /^INFO: / && !/^INFO: (ws-ksft shim|Running)/ {
		d = substr($0, 7); detail = detail (detail == "" ? "" : "; ") d; next
	}
	/^INFO: Running/ || /^TEST:/ { flush() }
	END { flush() }
	' "$log"
}

run_one()
{
	local t=$1 mode=$2 idx=$3 total=$4
	local dir=$RESULTS/${t%.sh}/$mode log rc start secs tests_env fp gro
	local n_ok n_fail n_other note=""

	mkdir -p "$dir"
	log=$dir/output.log
	prepare_scratch "$t" "$mode" "$dir" || return 2
	ns_teardown
	ip netns add "$ROUTER_NS" || return 2
	ip -n "$ROUTER_NS" link set dev lo up

	fp=$(mode_fp "$mode")
	gro=$(mode_gro "$mode")
	local -a envs=()
	tests_env=""
	((QUICK)) && tests_env=$(quick_tests "$t")
	[[ -n $tests_env ]] && envs+=("TESTS=$tests_env")
	CUR_RUNDIR=$dir/run

	start=$SECONDS
	(
		cd "$dir/net/forwarding" || exit 2
		exec timeout -k 15 "$RUN_TIMEOUT" ip netns exec "$ROUTER_NS" env \
			"${envs[@]}" \
			WS_KSFT_SHIM="$HERE/shim.sh" \
			WS_KSFT_ROUTER_NS="$ROUTER_NS" \
			WS_KSFT_RUNDIR="$dir/run" \
			WS_KSFT_FP="$fp" \
			WS_KSFT_GRO="$gro" \
			WS_KSFT_WIRESPEED="$WIRESPEED" \
			bash "./$t"
	) >"$log" 2>&1 </dev/null
	rc=$?
	secs=$((SECONDS - start))

	fp_stop_all "$dir/run"
	CUR_RUNDIR=""
	ns_teardown
	[[ -n $(ns_list) ]] && say "WARN: namespaces left after $t/$mode: $(ns_list | tr '\n' ' ')"

	parse_output "$t" "$mode" "$log" >> "$RESULTS/checks.tsv"
	n_ok=$(awk -F'\t' -v t="$t" -v m="$mode" '$1==t && $2==m && $4=="OK"' "$RESULTS/checks.tsv" | wc -l)
	n_fail=$(awk -F'\t' -v t="$t" -v m="$mode" '$1==t && $2==m && $4=="FAIL"' "$RESULTS/checks.tsv" | wc -l)
	n_other=$(awk -F'\t' -v t="$t" -v m="$mode" '$1==t && $2==m && $4!="OK" && $4!="FAIL"' "$RESULTS/checks.tsv" | wc -l)
	case $rc in
	0|1) ;;
	4) ((n_ok + n_fail + n_other)) || note="skipped: $(grep -m1 '^SKIP' "$log" || echo "exit 4")" ;;
	124|137) note="TIMEOUT after ${RUN_TIMEOUT}s" ;;
	*) note="exit $rc" ;;
	esac
	grep -q 'WARN: fp in .*not attached' "$log" && note+="${note:+; }fp not attached everywhere"
	local fps
	fps=$(fp_summary "$dir/run")
	printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$mode" "$rc" "$secs" "$fps" "$note" >> "$RESULTS/runs.tsv"
	say "$(printf '[%2d/%d] %-28s %-14s %3d OK %3d FAIL %2d other %4ds%s%s' \
		"$idx" "$total" "$t" "$mode" "$n_ok" "$n_fail" "$n_other" "$secs" \
		"${fps:+  fp $fps}" "${note:+  ($note)}")"
}

################################################################################

say "kernel-selftests: $(uname -r), ${#TESTS[@]} selftests x ${#MODES[@]} modes (${MODES[*]})$( ((QUICK)) && echo ', quick')"
say "kernel-selftests: logs in $RESULTS"
total=$(( ${#TESTS[@]} * ${#MODES[@]} ))
idx=0
t_all=$SECONDS
for t in "${TESTS[@]}"; do
	for mode in "${MODES[@]}"; do
		idx=$((idx + 1))
		run_one "$t" "$mode" "$idx" "$total" || die "could not set up $t ($mode)"
	done
done
t_all=$((SECONDS - t_all))

################################################################################
# Classification and summary

# verdicts.tsv: test, check, mode, baseline mode, baseline result, result, class, detail
awk -F'\t' -v modes="${MODES[*]}" '
BEGIN { nm = split(modes, M, " ") }
FNR == NR { runs[$1 "\t" $2] = 1; next }
{
	k = $1 "\t" $3
	if (!(k in order)) { order[k] = ++n; keys[n] = k }
	res[k "\t" $2] = $4; det[k "\t" $2] = $5
}
END {
	for (i = 1; i <= n; i++) {
		k = keys[i]; split(k, a, "\t")
		for (j = 1; j <= nm; j++) {
			m = M[j]
			if (m == "nofp" || m == "nofp-gro") {
				if ((k "\t" m) in res && res[k "\t" m] == "FAIL")
					print k "\t" m "\t" m "\tFAIL\tFAIL\tfails-without-fp\t" det[k "\t" m]
				continue
			}
			b = (m ~ /-gro$/ && ((a[1] "\tnofp-gro") in runs)) ? "nofp-gro" : "nofp"
			if (!((a[1] "\t" m) in runs)) continue
			br = ((k "\t" b) in res) ? res[k "\t" b] : "absent"
			r = ((k "\t" m) in res) ? res[k "\t" m] : "absent"
			cls = ""
			if (br == "OK" && (r == "FAIL" || r == "absent")) cls = "DIVERGENCE"
			else if (br == "FAIL" && r == "OK") cls = "passes-only-with-fp"
			else if (br == "absent" && r == "FAIL") cls = "fails-no-baseline"
			if (cls != "") print k "\t" m "\t" b "\t" br "\t" r "\t" cls "\t" det[k "\t" m]
		}
	}
}' "$RESULTS/runs.tsv" "$RESULTS/checks.tsv" > "$RESULTS/verdicts.tsv"

n_div=$(awk -F'\t' '$7=="DIVERGENCE"' "$RESULTS/verdicts.tsv" | wc -l)
n_fwf=$(awk -F'\t' '$7=="fails-without-fp"' "$RESULTS/verdicts.tsv" | wc -l)
n_runerr=$(awk -F'\t' '$3!=0 && $3!=1 && $3!=4' "$RESULTS/runs.tsv" | wc -l)
exit_code=0
((n_div > 0)) && exit_code=1

print_table()
{
	local t mode hdr
	printf '\n== kernel forwarding selftests: results (OK/FAIL/SKIP/XFAIL; "!" divergence, "-" absent)\n'
	for t in "${TESTS[@]}"; do
		printf '\n%s\n' "$t"
		hdr=$(printf '  %-62s' "check")
		for mode in "${MODES[@]}"; do hdr+=$(printf ' %-13s' "$mode"); done
		echo "$hdr"
		awk -F'\t' -v t="$t" -v modes="${MODES[*]}" '
		BEGIN { nm = split(modes, M, " ") }
		FILENAME ~ /verdicts/ { if ($1 == t && $7 == "DIVERGENCE") div[$2 "\t" $3] = 1; next }
		$1 == t {
			if (!($3 in order)) { order[$3] = ++n; keys[n] = $3 }
			res[$3 "\t" $2] = $4
		}
		END {
			for (i = 1; i <= n; i++) {
				line = sprintf("  %-62s", substr(keys[i], 1, 62))
				for (j = 1; j <= nm; j++) {
					c = ((keys[i] "\t" M[j]) in res) ? res[keys[i] "\t" M[j]] : "-"
					if ((keys[i] "\t" M[j]) in div) c = c "!"
					line = line sprintf(" %-13s", c)
				}
				print line
			}
		}' "$RESULTS/verdicts.tsv" "$RESULTS/checks.tsv"
		awk -F'\t' -v t="$t" '$1 == t {
			s = sprintf("  %-14s %4ds", $2, $4)
			if ($5 != "") s = s "  fp " $5
			if ($6 != "") s = s "  (" $6 ")"
			print s }' "$RESULTS/runs.tsv"
	done

	printf '\n== DIVERGENCES (pass without fp, fail with fp): %d\n' "$n_div"
	awk -F'\t' '$7 == "DIVERGENCE" {
		printf "  %s: %s [%s: %s; %s: %s]%s\n", $1, $2, $3, $6, $4, $5, ($8 != "" ? "\n      " $8 : "") }' \
		"$RESULTS/verdicts.tsv"
	printf '\n== fails without fp (the kernel alone, here): %d\n' "$n_fwf"
	awk -F'\t' '$7 == "fails-without-fp" {
		printf "  %s: %s [%s]%s\n", $1, $2, $3, ($8 != "" ? "\n      " $8 : "") }' "$RESULTS/verdicts.tsv"
	if awk -F'\t' '$7 == "passes-only-with-fp" || $7 == "fails-no-baseline" { f = 1 } END { exit !f }' \
		"$RESULTS/verdicts.tsv"; then
		printf '\n== other\n'
		awk -F'\t' '$7 == "passes-only-with-fp" || $7 == "fails-no-baseline" {
			printf "  %s: %s [%s] %s\n", $1, $2, $3, $7 }' "$RESULTS/verdicts.tsv"
	fi
	if ((n_runerr > 0)); then
		printf '\n== runs that did not finish normally\n'
		awk -F'\t' '$3 != 0 && $3 != 1 && $3 != 4 { printf "  %s %s: exit %s %s\n", $1, $2, $3, $6 }' \
			"$RESULTS/runs.tsv"
	fi
	printf '\n%d selftest runs in %ds; logs: %s\n' "$total" "$t_all" "$RESULTS"
}

print_json()
{
	jq -n \
		--arg kernel "$(uname -r)" \
		--arg source "$(sed -n 's/^Source: //p' "$HERE/README.md" | head -1)" \
		--argjson quick "$QUICK" \
		--arg modes "${MODES[*]}" \
		--arg results "$RESULTS" \
		--argjson seconds "$t_all" \
		--argjson exit "$exit_code" \
		--rawfile runs "$RESULTS/runs.tsv" \
		--rawfile checks "$RESULTS/checks.tsv" \
		--rawfile verdicts "$RESULTS/verdicts.tsv" '
	def rows($s): $s | split("\n") | map(select(length > 0) | split("\t"));
	(rows($checks)) as $c
	| {
		kernel: $kernel, selftests_source: $source, quick: ($quick == 1),
		modes: ($modes | split(" ")), seconds: $seconds, logs: $results,
		runs: [rows($runs)[] as $r | {
			test: $r[0], mode: $r[1], exit: ($r[2] | tonumber), seconds: ($r[3] | tonumber),
			fp: $r[4], note: $r[5],
			checks: [$c[] | select(.[0] == $r[0] and .[1] == $r[1])
				| {name: .[2], result: .[3], detail: .[4]}]
		}],
		divergences: [rows($verdicts)[] | select(.[6] == "DIVERGENCE")
			| {test: .[0], check: .[1], mode: .[2], baseline_mode: .[3],
			   baseline: .[4], result: .[5], detail: .[7]}],
		fails_without_fp: [rows($verdicts)[] | select(.[6] == "fails-without-fp")
			| {test: .[0], check: .[1], mode: .[2], detail: .[7]}],
		other: [rows($verdicts)[] | select(.[6] != "DIVERGENCE" and .[6] != "fails-without-fp")
			| {test: .[0], check: .[1], mode: .[2], class: .[6]}],
		exit: $exit
	}'
}

if ((JSON)); then
	print_table >&2
	print_json
else
	print_table
fi
exit $exit_code
