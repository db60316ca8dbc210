#!/usr/bin/env bash
# Default vs Latency-Sensitivity=High vs direct, side by side in one run: a
# port's round trip to the wire through an uplink, and the CPU the switch
# burns for it. The studies' question: what does each mode buy at what price.
#
#   port a (the port under test, vhost-user, fixed MAC)
#     default: switched (FDB, VLAN, shares), served by the shared worker
#     high:    switched, served by a dedicated busy-polling worker on CPU 1
#     high-rt: high, the dedicated worker under SCHED_FIFO ($RT_PRIO, default 50)
#     direct:  bound 1:1 to an uplink receive queue, no switching
#   uplink up: one end of a veth pair; the other end in a namespace (the wire)
#
#   poll:   vnio rr --via port a (the poll-mode endpoint, sleeping on its
#           call eventfd between packets as an interrupt-driven guest does)
#           -> uplink -> kernel UDP in the namespace (a vnio agent answers)
#   kernel: vnio rr with a kernel UDP socket in the namespace -> uplink ->
#           vnio endpoint on port a (poll-mode echo, sleeping on its eventfd)
#
# Configurations alternate round by round; each round starts a fresh switch.
# Prints the median round's p50, p99, p99.99 per configuration, the ratios to
# default, the switch's CPU (% of one core over the round) and the
# environment. Open loop at RATE round trips/s (latency from the intended
# send instant), so workers have idle time where a sleeping worker's wake-up
# shows.
#
#   crates/switch/bench/latency-modes.sh [ROUNDS=3] [SECONDS=5] [RATE=10000]
#   CONFIGS="default high direct" limits the configurations.
#   SHIELD=1 isolates CPU 1 for the run without a reboot: every other task on
#            the host moves to a cpuset holding CPU 0 only (cgroup v1
#            cpuset, restored at exit), so latency high's worker has its
#            core to itself, as isolcpus would give it; default and direct
#            then run their switch on CPU 0 with everything else (a port
#            that is not latency-sensitive gets no core of its own). If the
#            script is SIGKILLed, the next run puts stranded tasks back.
#
# Placement: the switch may use CPUs 0 and 1 (latency high: its dedicated
# worker takes CPU 1, the shared worker CPU 0); the measuring threads and
# the agent run on CPU 0. Needs root (namespace, veth).
set -euo pipefail
rounds=${1:-3}
secs=${2:-5}
rate=${3:-10000}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
vnio=${VNIO:-${CARGO_TARGET_DIR:-$root/target}/release/vnio}
run=$(mktemp -d /tmp/vnio-lmodes.XXXXXX)
out=${OUT:-$run/rows.csv}
ns=vnio-lm$$
up=vniolmu$$      # the switch's uplink (root namespace)
wire=vniolmw$$    # its peer, in the namespace
mgmt=vniolmm$$    # control connection to the agent, beside the measured path
mac=02:00:00:00:93:0a
pids=()
agent=

cleanup() {
    for p in "${pids[@]}" $agent; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}" $agent; do wait "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
    ip link del "$up" 2>/dev/null || true
    ip link del "$mgmt" 2>/dev/null || true
    [ -n "${KEEP:-}" ] || rm -rf "$run"
    [ -z "$shield" ] || shield_off "$shield"
}
# The shield: a cpuset with CPU 0 only, for every task but this script and
# what it starts (they stay in the root cpuset, CPUs 0-1).
cs=/sys/fs/cgroup/cpuset
shield_off() {   # DIR: move its tasks back to the root cpuset and remove it
    local p
    for _ in 1 2 3; do
        for p in $(cat "$1/cgroup.procs" 2>/dev/null); do echo "$p" >"$cs/cgroup.procs" 2>/dev/null || true; done
    done
    rmdir "$1" 2>/dev/null || echo "latency-modes: could not remove cpuset $1 (tasks left: $(wc -l <"$1/tasks"))" >&2
}
shield_on() {
    local hk=$cs/vnio-lm-hk$$ p
    [ -w "$cs/cgroup.procs" ] || { echo "latency-modes: SHIELD=1 needs the cgroup v1 cpuset controller at $cs" >&2; exit 1; }
    mkdir "$hk"
    shield=$hk
    echo 0 >"$hk/cpuset.cpus"
    cat "$cs/cpuset.mems" >"$hk/cpuset.mems"
    # Twice: a process forked while the first pass ran is caught by the second.
    for _ in 1 2; do
        for p in $(cat "$cs/cgroup.procs"); do
            [ "$p" = $$ ] || echo "$p" >"$hk/cgroup.procs" 2>/dev/null || true
        done
    done
    echo "latency-modes: CPU 1 shielded: $(wc -l <"$cs/tasks") tasks left on CPUs 0-1 (this script, pinned kernel threads), $(wc -l <"$hk/tasks") moved to CPU 0" >&2
}
shield=
for stale in "$cs"/vnio-lm-hk*; do [ -d "$stale" ] && shield_off "$stale"; done

trap cleanup EXIT
trap 'exit 130' INT TERM

[ -x "$vnio" ] || { echo "latency-modes: build first: cargo build --release -p vnio" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "latency-modes: needs root (namespace and veth)" >&2; exit 1; }
[ "$(nproc)" -ge 2 ] || { echo "latency-modes: needs two CPUs (one to dedicate)" >&2; exit 1; }

switch_cpu() {   # utime+stime ticks of the switch process
    awk '{print $14 + $15}' "/proc/$1/stat"
}

start_switch() {   # CONFIG (default|high|high-rt|direct)
    local lat=normal rt="" direct=""
    case $1 in
        high) lat=high ;;
        high-rt) lat=high; rt="dedicated_rt_priority = ${RT_PRIO:-50}" ;;
        direct) direct='direct = "up"' ;;
    esac
    cat >"$run/sw.toml" <<TOML
[switch]
control = "$run/ctl.sock"
$rt
[[port]]
name = "up"
kind = "uplink"
ifname = "$up"
queues = 2
[[port]]
name = "a"
kind = "vhost-user"
socket = "$run/a.sock"
mac = "$mac"
latency = "$lat"
$direct
TOML
    local cpus=0,1
    # Shielded, only latency high may use CPU 1.
    [ -z "${SHIELD:-}" ] || [ "$lat" = high ] || cpus=0
    taskset -c $cpus "$vnio" switch --config "$run/sw.toml" 2>"$run/switch.log" &
    swpid=$!
    pids+=("$swpid")
    for _ in $(seq 100); do [ -S "$run/ctl.sock" ] && break; sleep 0.05; done
    [ -S "$run/ctl.sock" ] || { echo "latency-modes: the switch did not start: $(tail -1 "$run/switch.log")" >&2; exit 1; }
}

stop_switch() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    pids=()
    rm -f "$run"/*.sock
}

record() {   # KIND CONFIG ROUND DOC CPU%
    python3 "$here/rtt_rows.py" row "$1" "$2" "$3" "$5" "$4" >>"$out"
}

one() {   # KIND CONFIG ROUND
    local kind=$1 cfg=$2 r=$3 doc c0 c1 hz
    hz=$(getconf CLK_TCK)
    start_switch "$cfg"
    if [ "$kind" = poll ]; then
        sleep 0.3
        c0=$(switch_cpu "$swpid")
        doc=$("$vnio" rr -p udp -t 10.93.0.20 --size 64 -r "$rate" \
            --via "vhost-user:$run/a.sock,ip=10.93.0.10,mac=$mac,wait" \
            -d "${secs}s" --warmup 1s --cpu 0 --json 2>"$run/rr.log") ||
            { echo "$kind/$cfg round $r failed: $(tail -1 "$run/rr.log")" >&2; stop_switch; return 0; }
    else
        "$vnio" endpoint "vhost-user:$run/a.sock,ip=10.93.0.10,mac=$mac,wait" --cpu 0 2>"$run/ep.log" &
        pids+=($!)
        sleep 0.5
        c0=$(switch_cpu "$swpid")
        doc=$(ip netns exec "$ns" "$vnio" rr -p udp --echo-server -t 10.93.0.10:7 --size 64 -r "$rate" \
            -d "${secs}s" --warmup 1s --cpu 0 --json 2>"$run/rr.log") ||
            { echo "$kind/$cfg round $r failed: $(tail -1 "$run/rr.log")" >&2; stop_switch; return 0; }
    fi
    c1=$(switch_cpu "$swpid")
    # CPU over warm-up and measurement, in % of one core.
    record "$kind" "$cfg" "$r" "$doc" "$(( (c1 - c0) * 100 / hz / (secs + 1) ))"
    stop_switch
}

# The wire: a veth pair, one end the switch's uplink, the other in the
# namespace at 10.93.0.20 with a static neighbour entry for port a (a direct
# port receives only frames for its MAC: broadcasts go to switched ports).
# A second veth carries the agent's control connection beside it.
ip netns add "$ns"
ip link add "$up" type veth peer name "$wire" netns "$ns"
ip link add "$mgmt" type veth peer name eth1 netns "$ns"
ip link set "$up" up
ip link set "$mgmt" up
ip addr add 10.93.1.1/30 dev "$mgmt"
ip route add 10.93.0.20/32 via 10.93.1.2
ip -n "$ns" link set lo up
ip -n "$ns" link set "$wire" up
ip -n "$ns" link set eth1 up
ip -n "$ns" addr add 10.93.0.20/24 dev "$wire"
ip -n "$ns" addr add 10.93.1.2/30 dev eth1
ip -n "$ns" neigh replace 10.93.0.10 lladdr "$mac" dev "$wire"
ip netns exec "$ns" taskset -c 0 "$vnio" agent --listen 0.0.0.0:7700 2>"$run/agent.log" &
agent=$!
sleep 0.3
[ -z "${SHIELD:-}" ] || shield_on

configs=${CONFIGS:-default high high-rt direct}
python3 "$here/rtt_rows.py" header >"$out"
for r in $(seq "$rounds"); do
    for kind in poll kernel; do
        for cfg in $configs; do
            echo "round $r: $kind $cfg" >&2
            one "$kind" "$cfg" "$r"
        done
    done
done

. "$here/env.sh"
echo "# latency-modes: 64 B UDP round trips to the wire at ${rate}/s, ${secs}s x $rounds rounds per configuration;" \
    "switch on CPUs 0-1 (high: dedicated worker CPU 1, shared CPU 0), measuring threads and agent on CPU 0" \
    "${SHIELD:+; CPU 1 shielded (every other task on CPU 0; default and direct switch on CPU 0)}"
python3 "$here/rtt_rows.py" summary "$out"
