# shellcheck shell=bash
# shim.sh: runs the kernel's forwarding selftests (kept verbatim in forwarding/ and net/)
# on a machine without the VRF driver, and starts `wirespeed fp run` for the fp modes.
#
# It is not sourced by hand: run.sh writes a forwarding.config (the selftests' own override
# file) that arms a one-shot RETURN trap, and that trap sources this file right after
# forwarding/lib.sh has defined its functions, so that the definitions below win.
# Because it is sourced from inside a trap handler (a function), every global here is
# declared with `declare -g`.
#
# The model: every VRF of a selftest becomes a network namespace of its own
# (ws-ksft-ns-<vrf>), except the VRF that holds the selftest's second port ($NETIFS[p2],
# the router's first port in every script here): that one is the "router" namespace the
# script itself runs in (ws-ksft-router), so the router's ports never move. Everything that
# the selftest addresses to a VRF or to a port that lives in a VRF namespace is run in that
# namespace. In the original all VRFs share one namespace, so a write to a namespace-wide
# sysctl (net.ipv4.conf.all.forwarding, fib_multipath_hash_policy, ...) is replayed in
# every VRF namespace too.
#
# Replaced functions of forwarding/lib.sh: vrf_create vrf_destroy master_name_get setup_wait
# tests_run (those two call the original, adding the GRO/fp steps and fp's counters)
# Commands shadowed by shell functions: ip tc sysctl $MZ (mausezahn) pkill
# ip vrf exec VRF sh -c: bash -c (a selftest uses bash brace expansion; sh is dash here)
# tc: flower filters become u32 + mirred ones (this kernel has neither flower nor gact)
#
# Environment (set by run.sh):
#   WS_KSFT_ROUTER_NS   the namespace the script runs in (ws-ksft-router)
#   WS_KSFT_RUNDIR      where fp logs, pid files and status snapshots go
#   WS_KSFT_FP          none | router | all: where to run `wirespeed fp run`
#   WS_KSFT_GRO         yes: `ethtool -K <dev> gro on` on every veth end before fp starts
#   WS_KSFT_WIRESPEED   the wirespeed binary
#   WS_KSFT_FP_TIMEOUT  seconds to wait for fp to attach every port (default 30)
#   WS_KSFT_ROUTER_VRFS extra VRF names to keep in the router namespace (space-separated)

declare -g WS_ROUTER_NS=${WS_KSFT_ROUTER_NS:-ws-ksft-router}
declare -g WS_RUNDIR=${WS_KSFT_RUNDIR:-/tmp/ksft-work/run}
declare -g WS_FP=${WS_KSFT_FP:-none}
declare -g WS_GRO=${WS_KSFT_GRO:-no}
declare -g WS_WIRESPEED=${WS_KSFT_WIRESPEED:-wirespeed}
declare -g WS_FP_TIMEOUT=${WS_KSFT_FP_TIMEOUT:-30}
declare -g WS_SHIM_OVERRIDES="vrf_create vrf_destroy master_name_get setup_wait tests_run"
declare -g WS_SHIM_COMMANDS="ip tc sysctl ${MZ:-mausezahn} pkill"

declare -gA WS_VRF_DECLARED=()  # VRF name -> 1 (vrf_create was called)
declare -gA WS_VRF_NS=()        # VRF name -> namespace; "" = the router namespace
declare -gA WS_DEV_NS=()        # device -> namespace, for devices moved out of the router ns
declare -gA WS_DEV_VRF=()       # device -> VRF it was enslaved to
declare -gA WS_NH_NS=()         # nexthop id -> namespace ("" = router)
declare -gA WS_GLOBAL_SYSCTL=() # namespace-wide sysctl writes, replayed into new namespaces
declare -ga WS_GLOBAL_SYSCTL_ORDER=()
declare -ga WS_FP_STARTED=()    # namespaces where this shim started fp ("" = router)

mkdir -p "$WS_RUNDIR"

# __ws_has ARRAY KEY: KEY is a non-empty key of the associative ARRAY
__ws_has()
{
	local -n __ws_arr=$1
	[[ -n $2 && -n ${__ws_arr[$2]+x} ]]
}

__ws_log()
{
	echo "INFO: ws-ksft shim: $*"
}

__ws_log "replaces ${WS_SHIM_OVERRIDES// /, }; shadows commands ${WS_SHIM_COMMANDS// /, }" \
	"(VRF -> namespace, router namespace $WS_ROUTER_NS, fp: $WS_FP, gro: $WS_GRO)"

# The namespaces that stand for VRFs (not the router's).
__ws_vrf_namespaces()
{
	local v
	for v in "${!WS_VRF_NS[@]}"; do
		[[ -n ${WS_VRF_NS[$v]} ]] && echo "${WS_VRF_NS[$v]}"
	done | sort -u
}

__ws_ns_name()
{
	local vrf=$1
	echo "ws-ksft-ns-${vrf//[^A-Za-z0-9_.-]/_}"
}

__ws_is_router_vrf()
{
	local vrf=$1 dev=$2 v
	[[ $dev == "${NETIFS[p2]}" ]] && return 0
	for v in $WS_KSFT_ROUTER_VRFS; do
		[[ $v == "$vrf" ]] && return 0
	done
	return 1
}

# Decide where a VRF lives the first time a device is enslaved to it.
__ws_vrf_place()
{
	local vrf=$1 dev=$2 ns key

	__ws_has WS_VRF_NS "$vrf" && return 0
	if __ws_is_router_vrf "$vrf" "$dev"; then
		WS_VRF_NS[$vrf]=""
		__ws_log "VRF $vrf -> router namespace $WS_ROUTER_NS"
		return 0
	fi
	ns=$(__ws_ns_name "$vrf")
	command ip netns del "$ns" &>/dev/null
	command ip netns add "$ns" || return 1
	command ip -n "$ns" link set dev lo up
	for key in "${WS_GLOBAL_SYSCTL_ORDER[@]}"; do
		command ip netns exec "$ns" sysctl -q -w "$key=${WS_GLOBAL_SYSCTL[$key]}" &>/dev/null
	done
	WS_VRF_NS[$vrf]=$ns
	__ws_log "VRF $vrf -> namespace $ns"
}

__ws_enslave()
{
	local dev=$1 vrf=$2 ns

	__ws_vrf_place "$vrf" "$dev" || return 1
	ns=${WS_VRF_NS[$vrf]}
	WS_DEV_VRF[$dev]=$vrf
	[[ -z $ns ]] && return 0
	[[ ${WS_DEV_NS[$dev]} == "$ns" ]] && return 0
	command ip link set dev "$dev" netns "$ns" || return 1
	WS_DEV_NS[$dev]=$ns
}

__ws_release()
{
	local dev=$1 ns=${WS_DEV_NS[$1]}

	if [[ -n $ns ]]; then
		command ip -n "$ns" link set dev "$dev" netns "$WS_ROUTER_NS" || return 1
		unset "WS_DEV_NS[$dev]"
	fi
	unset "WS_DEV_VRF[$dev]"
	return 0
}

# The namespace a nexthop id lives in: after an add, in that of its device or members.
__ws_nh_first_member()
{
	local grp=$1
	grp=${grp%%/*}
	echo "${grp%%,*}"
}

################################################################################
# Replaced lib.sh functions

vrf_create()
{
	local vrf_name=$1

	__vrf_td_id_assign "$vrf_name"
	WS_VRF_DECLARED[$vrf_name]=1
	# The namespace is made when the first port is enslaved (see __ws_vrf_place).
}

vrf_destroy()
{
	local vrf_name=$1 ns dev

	ns=${WS_VRF_NS[$vrf_name]}
	for dev in "${!WS_DEV_VRF[@]}"; do
		[[ ${WS_DEV_VRF[$dev]} == "$vrf_name" ]] && __ws_release "$dev"
	done
	if [[ -n $ns ]]; then
		__ws_fp_stop "$ns"
		command ip netns del "$ns"
	fi
	unset "WS_VRF_NS[$vrf_name]" "WS_VRF_DECLARED[$vrf_name]"
}

master_name_get()
{
	local if_name=$1

	if __ws_has WS_DEV_VRF "$if_name"; then
		echo "${WS_DEV_VRF[$if_name]}"
		return 0
	fi
	command ip -j link show dev "$if_name" | jq -r '.[]["master"]'
}

# setup_wait runs right after setup_prepare in every selftest: turn GRO on where asked,
# start fp, let the original wait for the links run, then wait for fp to attach.
declare -F __ws_orig_setup_wait >/dev/null ||
	eval "__ws_orig_setup_wait() $(declare -f setup_wait | tail -n +2)"
setup_wait()
{
	local num_netifs=${1:-$NUM_NETIFS}
	local ns

	[[ $WS_GRO == yes ]] && __ws_gro_on "$num_netifs"
	# The tc shim's sink devices exist before fp starts, in every mode alike.
	__ws_tc_sink ""
	for ns in $(__ws_vrf_namespaces); do
		__ws_tc_sink "$ns"
	done
	case $WS_FP in
	router)
		__ws_fp_start ""
		;;
	all)
		__ws_fp_start ""
		for ns in $(__ws_vrf_namespaces); do
			__ws_fp_start "$ns"
		done
		;;
	esac

	__ws_orig_setup_wait "$@"

	for ns in "${WS_FP_STARTED[@]}"; do
		__ws_fp_wait "$ns" "$num_netifs"
	done
	((${#WS_FP_STARTED[@]})) && __ws_fp_settle
}

# tests_run: the selftest's checks; fp's counters are read right after them, before the
# selftest's cleanup takes the ports down.
declare -F __ws_orig_tests_run >/dev/null ||
	eval "__ws_orig_tests_run() $(declare -f tests_run | tail -n +2)"
tests_run()
{
	local ns tag
	__ws_orig_tests_run "$@"
	for ns in "${WS_FP_STARTED[@]}"; do
		tag=$(__ws_tag "$ns")
		__ws_in "$ns" "$WS_WIRESPEED" fp status --json >"$WS_RUNDIR/fp-$tag.final.json" 2>/dev/null
	done
}

################################################################################
# GRO and fp

__ws_in()
{
	local ns=$1; shift
	if [[ -z $ns ]]; then
		command "$@"
	else
		command ip netns exec "$ns" "$@"
	fi
}

__ws_gro_on()
{
	local num_netifs=$1 i dev
	for ((i = 1; i <= num_netifs; ++i)); do
		dev=${NETIFS[p$i]}
		__ws_in "${WS_DEV_NS[$dev]}" ethtool -K "$dev" gro on \
			|| __ws_log "WARN: could not turn GRO on at $dev"
	done
	__ws_log "GRO on at ${num_netifs} veth ends"
}

__ws_tag()
{
	local ns=$1
	echo "${ns:-$WS_ROUTER_NS}"
}

__ws_fp_start()
{
	local ns=$1 tag pidf
	tag=$(__ws_tag "$ns")
	pidf=$WS_RUNDIR/fp-$tag.pid
	rm -f "$pidf"
	# setsid -f: not a job of this shell (stop_traffic kills the current job, `%%`).
	if [[ -z $ns ]]; then
		setsid -f bash -c 'echo $$ > "$1"; shift; exec "$@"' _ "$pidf" \
			"$WS_WIRESPEED" fp run \
			>>"$WS_RUNDIR/fp-$tag.log" 2>&1 </dev/null
	else
		setsid -f ip netns exec "$ns" \
			bash -c 'echo $$ > "$1"; shift; exec "$@"' _ "$pidf" \
			"$WS_WIRESPEED" fp run \
			>>"$WS_RUNDIR/fp-$tag.log" 2>&1 </dev/null
	fi
	WS_FP_STARTED+=("$ns")
	__ws_log "fp run started in $tag"
}

__ws_fp_wait()
{
	local ns=$1 num_netifs=$2 tag pid i dev json missing
	local -a want=()
	local deadline=$((SECONDS + WS_FP_TIMEOUT))

	tag=$(__ws_tag "$ns")
	for ((i = 1; i <= num_netifs; ++i)); do
		dev=${NETIFS[p$i]}
		[[ ${WS_DEV_NS[$dev]} == "$ns" ]] && want+=("$dev")
	done
	while :; do
		pid=$(cat "$WS_RUNDIR/fp-$tag.pid" 2>/dev/null)
		json=$(__ws_in "$ns" "$WS_WIRESPEED" fp status --json 2>/dev/null)
		missing=""
		if [[ -n $pid ]] && jq -e --argjson pid "$pid" \
				'.running == true and .pid == $pid' <<<"$json" &>/dev/null; then
			for dev in "${want[@]}"; do
				jq -e --arg d "$dev" 'any(.ports[]; .name == $d)' \
					<<<"$json" &>/dev/null || missing+=" $dev"
			done
			[[ -z $missing ]] && break
		else
			missing=" (not running)"
		fi
		if ((SECONDS >= deadline)); then
			__ws_log "WARN: fp in $tag: not attached after ${WS_FP_TIMEOUT}s:$missing"
			break
		fi
		sleep 0.5
	done
}

# fp picks each port's hook from the peers' XDP features, which change as GRO or the other
# namespaces' programs come up: wait until no hook has changed for a second (at most 10 s).
__ws_fp_settle()
{
	local ns tag prev="" cur stable=0 i
	for ((i = 0; i < 20; ++i)); do
		cur=""
		for ns in "${WS_FP_STARTED[@]}"; do
			cur+=$(__ws_in "$ns" "$WS_WIRESPEED" fp status --json 2>/dev/null |
				jq -c '[.ports[] | [.name, .hook]] | sort' 2>/dev/null)
		done
		if [[ $cur == "$prev" ]]; then
			((++stable >= 2)) && break
		else
			stable=0
		fi
		prev=$cur
		sleep 0.5
	done
	for ns in "${WS_FP_STARTED[@]}"; do
		tag=$(__ws_tag "$ns")
		__ws_in "$ns" "$WS_WIRESPEED" fp status --json >"$WS_RUNDIR/fp-$tag.status.json" 2>/dev/null
		__ws_log "fp in $tag: $(jq -r '[.ports[] | "\(.name)=\(.hook)"] | join(" ")' \
			"$WS_RUNDIR/fp-$tag.status.json" 2>/dev/null)"
	done
}

__ws_fp_stop()
{
	local ns=$1 tag pidf pid i
	tag=$(__ws_tag "$ns")
	pidf=$WS_RUNDIR/fp-$tag.pid
	[[ -f $pidf ]] || return 0
	pid=$(cat "$pidf")
	[[ $pid =~ ^[0-9]+$ ]] || return 0
	[[ -f $WS_RUNDIR/fp-$tag.final.json ]] ||
		__ws_in "$ns" "$WS_WIRESPEED" fp status --json >"$WS_RUNDIR/fp-$tag.final.json" 2>/dev/null
	kill -TERM "$pid" 2>/dev/null || { rm -f "$pidf"; return 0; }
	for ((i = 0; i < 50; ++i)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null
	rm -f "$pidf"
	__ws_log "fp in $tag stopped"
}

################################################################################
# Shadowed commands

ip()
{
	local -a opts=() rest=() out=()
	local obj ns="" have_ns=0 i n tok vrf dev cmd nhid

	# Leading options; an explicit -n/-netns is the caller's choice.
	while (($#)) && [[ $1 == -* ]]; do
		case $1 in
		-n|-netns|-all|-a) command ip "${opts[@]}" "$@"; return ;;
		-b|-batch|-rc|-rcvbuf|-l|-loops|-f|-family)
			opts+=("$1" "$2"); shift 2; continue ;;
		esac
		opts+=("$1"); shift
	done
	obj=$1; shift
	rest=("$@")
	n=${#rest[@]}

	case $obj in
	vrf)
		if [[ ${rest[0]} == exec ]] && __ws_has WS_VRF_DECLARED "${rest[1]}"; then
			vrf=${rest[1]}
			__ws_has WS_VRF_NS "$vrf" || __ws_log "WARN: ip vrf exec $vrf: VRF has no port"
			local -a c=("${rest[@]:2}")
			# custom_multipath_hash.sh's flow-label sender is `sh -c "for _ in {1..16384}"`:
			# a bash brace expansion; /bin/sh is dash on Debian (one ping instead of 16384).
			if [[ ${c[0]} == sh && ${c[1]-} == -c ]]; then
				c[0]=bash
				__ws_log "ip vrf exec $vrf sh -c ...: run by bash (brace expansion)"
			fi
			__ws_in "${WS_VRF_NS[$vrf]-}" "${c[@]}"
			return
		fi
		;;
	l|li|lin|link)
		cmd=${rest[0]}
		# the device: after "dev", else the first word after the command
		for ((i = 1; i < n; ++i)); do
			if [[ ${rest[i]} == dev ]]; then dev=${rest[i+1]}; break; fi
		done
		[[ -z $dev && $cmd != add ]] && dev=${rest[1]}
		if [[ -n $dev ]] && __ws_has WS_VRF_DECLARED "$dev"; then
			# the VRF device itself: it has no counterpart
			case $cmd in
			set|s|show|sh|list|ls|lst|l) return 0 ;;
			esac
		fi
		if [[ $cmd == set || $cmd == s ]]; then
			for ((i = 1; i < n; ++i)); do
				if [[ ${rest[i]} == master ]] && __ws_has WS_VRF_DECLARED "${rest[i+1]}"; then
					__ws_enslave "$dev" "${rest[i+1]}" || return 1
					out=("${rest[@]:0:i}" "${rest[@]:i+2}")
					rest=("${out[@]}")
					n=${#rest[@]}
					break
				elif [[ ${rest[i]} == nomaster ]] && __ws_has WS_DEV_VRF "$dev"; then
					__ws_release "$dev" || return 1
					out=("${rest[@]:0:i}" "${rest[@]:i+1}")
					rest=("${out[@]}")
					n=${#rest[@]}
					break
				fi
			done
			# nothing left but "set dev X"?
			if ((n <= 3)); then
				[[ ${rest[1]} == dev && n -eq 3 ]] && return 0
				((n <= 2)) && return 0
			fi
		fi
		if [[ -n $dev ]] && __ws_has WS_DEV_NS "$dev"; then
			ns=${WS_DEV_NS[$dev]}; have_ns=1
		fi
		;;
	esac

	# "vrf NAME" selects the VRF's namespace and is dropped; "dev X" selects X's.
	out=()
	for ((i = 0; i < n; ++i)); do
		tok=${rest[i]}
		if [[ $tok == vrf ]] && __ws_has WS_VRF_DECLARED "${rest[i+1]}"; then
			vrf=${rest[i+1]}
			ns=${WS_VRF_NS[$vrf]}; have_ns=1
			((++i))
			continue
		fi
		if ((!have_ns)) && [[ $tok == dev || $tok == oif || $tok == iif ]] &&
		   __ws_has WS_DEV_NS "${rest[i+1]}"; then
			ns=${WS_DEV_NS[${rest[i+1]}]}; have_ns=1
		fi
		out+=("$tok")
	done

	# Nexthop objects live where their device, members or route are.
	nhid=""
	case $obj in
	nexthop|nh|nex|next|nexth|nextho)
		for ((i = 0; i < ${#out[@]}; ++i)); do
			[[ ${out[i]} == id ]] && nhid=${out[i+1]}
			if ((!have_ns)) && [[ ${out[i]} == group ]]; then
				tok=$(__ws_nh_first_member "${out[i+1]}")
				if __ws_has WS_NH_NS "$tok"; then
					ns=${WS_NH_NS[$tok]}; have_ns=1
				fi
			fi
		done
		if ((!have_ns)) && [[ -n $nhid ]] && __ws_has WS_NH_NS "$nhid"; then
			ns=${WS_NH_NS[$nhid]}; have_ns=1
		fi
		;;
	r|ro|rou|rout|route)
		for ((i = 0; i < ${#out[@]}; ++i)); do
			if ((!have_ns)) && [[ ${out[i]} == nhid ]] && __ws_has WS_NH_NS "${out[i+1]}"; then
				ns=${WS_NH_NS[${out[i+1]}]}; have_ns=1
			fi
		done
		;;
	esac

	if [[ -n $ns ]]; then
		command ip -n "$ns" "${opts[@]}" "$obj" "${out[@]}"
	else
		command ip "${opts[@]}" "$obj" "${out[@]}"
	fi
	local rc=$?
	if ((rc == 0)) && [[ -n $nhid ]]; then
		case ${out[0]} in
		add|a|replace|repl|change) WS_NH_NS[$nhid]=$ns ;;
		del|delete) unset "WS_NH_NS[$nhid]" ;;
		esac
	fi
	return $rc
}

# This kernel has no flower classifier and no gact action (pass/drop): only u32 and bpf,
# and mirred. A `tc filter add ... flower KEYS action pass|drop` of a selftest becomes the
# u32 filter that matches the same packets, counted by a mirred action on a sink device
# that is down (mirred counts every packet it sees; the copy, or for drop the packet, goes
# nowhere): pass = mirred mirror, drop = mirred redirect. `tc -j filter show` then reports
# the selftest's handle on that filter, so tc_rule_handle_stats_get and jq checks work.
declare -gA WS_TC_FLOWER=()     # "ns|dev|dir|pref" -> flower handle
declare -g WS_TC_SINK=wsksink

__ws_tc_sink()
{
	local ns=$1
	__ws_in "$ns" ip link show dev "$WS_TC_SINK" &>/dev/null && return 0
	__ws_in "$ns" ip link add "$WS_TC_SINK" type ifb
}

# __ws_tc_flower NS OPTS... -- ARGS (after "filter add|replace|change")
__ws_tc_flower()
{
	local ns=$1; shift
	local -a opts=() pre=() keys=() acts=()
	local dev="" dir="" pref="" handle="" proto="" fam=ip k v a
	while [[ $1 != -- ]]; do opts+=("$1"); shift; done
	shift
	local cmd=$1; shift
	while (($#)) && [[ $1 != flower ]]; do
		case $1 in
		dev) dev=$2; pre+=("$1" "$2"); shift 2; continue ;;
		ingress|egress) dir=$1 ;;
		protocol|proto) proto=$2; pre+=("$1" "$2"); shift 2; continue ;;
		pref|prio|priority) pref=$2; pre+=("$1" "$2"); shift 2; continue ;;
		handle) handle=$2; shift 2; continue ;;
		esac
		pre+=("$1"); shift
	done
	shift # flower
	dir=${dir:-ingress}
	[[ $proto == ipv6 ]] && fam=ip6
	while (($#)); do
		k=$1; v=${2-}
		case $k in
		skip_hw|skip_sw|verbose) shift; continue ;;
		src_ip|dst_ip)
			[[ $v == */* ]] || { [[ $fam == ip6 ]] && v=$v/128 || v=$v/32; }
			keys+=(match "$fam" "${k%_ip}" "$v") ;;
		ip_proto)
			case $v in
			tcp) v=6 ;; udp) v=17 ;; icmp) v=1 ;; icmpv6) v=58 ;;
			esac
			keys+=(match "$fam" protocol "$v" 0xff) ;;
		src_port|dst_port)
			keys+=(match "$fam" "${k%_port}port" "$v" 0xffff) ;;
		dst_mac|src_mac)
			keys+=(match ether "${k%_mac}" "$v") ;;
		action)
			shift
			break ;;
		*)
			__ws_log "WARN: tc flower key '$k' has no u32 translation"
			return 2 ;;
		esac
		shift 2
	done
	case ${1-pass} in
	pass|ok|continue|pipe) acts=(action mirred egress mirror dev "$WS_TC_SINK") ;;
	drop|shot) acts=(action mirred egress redirect dev "$WS_TC_SINK") ;;
	*) __ws_log "WARN: tc action '$1' has no translation"; return 2 ;;
	esac
	((${#keys[@]})) || keys=(match u32 0 0 at 0)
	__ws_tc_sink "$ns" || return 1
	__ws_in "$ns" tc "${opts[@]}" filter "$cmd" "${pre[@]}" u32 "${keys[@]}" "${acts[@]}" || return
	WS_TC_FLOWER["$ns|$dev|$dir|$pref"]=${handle:-1}
}

tc()
{
	local i ns="" a=("$@") obj="" oi=-1 cmd dev="" dir="" pref="" key out rc
	local -a opts=()
	for ((i = 0; i < ${#a[@]}; ++i)); do
		case ${a[i]} in
		-n|-netns) command tc "$@"; return ;;
		-*) ((oi < 0)) && opts+=("${a[i]}") ;;
		*) ((oi < 0)) && { oi=$i; obj=${a[i]}; } ;;
		esac
		case ${a[i]} in
		dev) dev=${a[i+1]}; __ws_has WS_DEV_NS "$dev" && ns=${WS_DEV_NS[$dev]} ;;
		ingress|egress) dir=${a[i]} ;;
		pref|prio|priority) pref=${a[i+1]} ;;
		esac
	done
	cmd=${a[oi+1]-}
	dir=${dir:-ingress}
	if [[ $obj == filter || $obj == f ]]; then
		case $cmd in
		add|replace|change)
			for ((i = oi + 2; i < ${#a[@]}; ++i)); do
				if [[ ${a[i]} == flower ]]; then
					__ws_tc_flower "$ns" "${opts[@]}" -- "${a[@]:oi+1}"
					return
				fi
			done
			;;
		del|delete)
			key="$ns|$dev|$dir|$pref"
			if __ws_has WS_TC_FLOWER "$key"; then
				# drop "handle H flower ..." : the u32 filter is alone at its pref
				local -a keep=()
				for ((i = oi + 2; i < ${#a[@]}; ++i)); do
					[[ ${a[i]} == handle || ${a[i]} == flower ]] && break
					keep+=("${a[i]}")
				done
				__ws_in "$ns" tc "${opts[@]}" filter "$cmd" "${keep[@]}"
				rc=$?
				((rc == 0)) && unset "WS_TC_FLOWER[$key]"
				return $rc
			fi
			;;
		show|list|ls|sh)
			if [[ " ${opts[*]} " == *" -j "* || " ${opts[*]} " == *" -json "* ]]; then
				out=$(__ws_in "$ns" tc "$@") || return
				local map="{}" k
				for k in "${!WS_TC_FLOWER[@]}"; do
					[[ $k == "$ns|$dev|"* ]] || continue
					map=$(jq -c --arg d "${k#"$ns|$dev|"}" --argjson h "${WS_TC_FLOWER[$k]}" \
						'. + {($d): $h}' <<<"$map")
				done
				# u32's own hash-table entry has no counterpart in flower: left out
				jq -c --arg dir "$dir" --argjson map "$map" '
					[.[] | select((.kind == "u32" and .options != null
					               and .options.actions == null) | not)
					 | if .kind == "u32" and .options.actions != null
					      and ($map["\($dir)|\(.pref)"] != null)
					   then .options.handle = $map["\($dir)|\(.pref)"] else . end]' <<<"$out"
				return
			fi
			;;
		esac
	fi
	if [[ -n $ns ]]; then
		command tc -n "$ns" "$@"
	else
		command tc "$@"
	fi
}

sysctl()
{
	local -a flags=() ops=()
	local op key dev ns write=0 rc=0

	for op in "$@"; do
		case $op in
		-*) flags+=("$op"); [[ $op == *w* ]] && write=1 ;;
		*) ops+=("$op"); [[ $op == *=* ]] && write=1 ;;
		esac
	done
	for op in "${ops[@]}"; do
		key=${op%%=*}
		key=${key//\//.}
		dev=""
		if [[ $key =~ ^net\.ipv[46]\.(conf|neigh)\.([^.]+)\. ]]; then
			dev=${BASH_REMATCH[2]}
		fi
		if [[ -n $dev ]] && __ws_has WS_DEV_NS "$dev"; then
			command ip netns exec "${WS_DEV_NS[$dev]}" sysctl "${flags[@]}" "$op" || rc=$?
			continue
		fi
		command sysctl "${flags[@]}" "$op" || rc=$?
		if ((write)) && [[ $op == *=* ]] && [[ -z $dev || $dev == all || $dev == default ]]; then
			__ws_has WS_GLOBAL_SYSCTL "$key" || WS_GLOBAL_SYSCTL_ORDER+=("$key")
			WS_GLOBAL_SYSCTL[$key]=${op#*=}
			for ns in $(__ws_vrf_namespaces); do
				command ip netns exec "$ns" sysctl -q -w "$op" &>/dev/null
			done
		fi
	done
	return $rc
}

__ws_mz()
{
	local a
	for a in "$@"; do
		if __ws_has WS_DEV_NS "$a"; then
			command ip netns exec "${WS_DEV_NS[$a]}" "$MZ" "$@"
			return
		fi
	done
	command "$MZ" "$@"
}
if [[ ${MZ:-mausezahn} =~ ^[A-Za-z0-9_.-]+$ ]]; then
	eval "${MZ:-mausezahn}() { __ws_mz \"\$@\"; }"
fi

# router.sh's kill_mcd runs `pkill $MCD`: end only the daemon it started, by its pid file.
pkill()
{
	local pidf
	if [[ $# -eq 1 && $1 == "$MCD" && -n $SMCROUTEDIR ]]; then
		pidf=$SMCROUTEDIR/${table_name:-selftests}.pid
		if [[ -f $pidf ]]; then
			kill "$(cat "$pidf")" 2>/dev/null
			return
		fi
	fi
	__ws_log "WARN: pkill $* refused (only the selftest's own daemon, by pid file)"
	return 1
}
