#!/usr/bin/env bash
# Latency-Sensitivity=High vs default, side by side in one run: round trips
# through the switch to a port that is (high) or is not (default) served by
# a dedicated busy-polling worker on its own core, and the CPU the switch
# burns for it.
#
#   poll-mode: vnio rr --via port a (the port under test) -> vnio endpoint on
#              port b (UDP echo); both endpoints sleep on their call eventfd
#              between packets, as interrupt-driven guests do
#   kernel:    vnio rr with a kernel UDP socket in a namespace behind a tap
#              port -> vnio endpoint on port a (the port under test, UDP echo,
#              sleeping on its call eventfd)
#
# Configurations alternate round by round (default, high, high-rt, default...;
# high-rt: the dedicated worker under SCHED_FIFO, dedicated_rt_priority =
# $RT_PRIO, default 50: on a host where other processes may run on the
# dedicated core, a busy-polling thread otherwise waits for its CFS slice);
# each round starts a fresh switch. Prints the median round's p50, p99,
# p99.99 per configuration, the ratios high/default, the switch's CPU (% of
# one core over the round), and the environment.
#
#   crates/switch/bench/latency-high.sh [ROUNDS=3] [SECONDS=5] [RATE=10000]
#
# RATE: round trips per second (open loop, latency from the intended send
# instant), so the workers have idle time between packets, where a sleeping
# worker's wake-up shows. Placement: the switch may use CPUs 0 and 1 (with
# latency high, its dedicated worker takes CPU 1 and the shared worker CPU 0);
# the measuring threads run on CPU 0. Needs root (namespace, tap).
set -euo pipefail
rounds=${1:-3}
secs=${2:-5}
rate=${3:-10000}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
vnio=${VNIO:-${CARGO_TARGET_DIR:-$root/target}/release/vnio}
run=$(mktemp -d /tmp/vnio-lathigh.XXXXXX)
out=${OUT:-$run/rows.csv}
ns=vnio-lh$$
tap=vniolh$$
pids=()

cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
    ip link del "$tap" 2>/dev/null || true
    [ -n "${KEEP:-}" ] || rm -rf "$run"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[ -x "$vnio" ] || { echo "latency-high: build first: cargo build --release -p vnio" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "latency-high: needs root (namespace and tap)" >&2; exit 1; }
[ "$(nproc)" -ge 2 ] || { echo "latency-high: needs two CPUs (one to dedicate)" >&2; exit 1; }

switch_cpu() {   # utime+stime ticks of the switch process
    awk '{print $14 + $15}' "/proc/$1/stat"
}

start_switch() {   # CONFIG (default|high|high-rt)
    local lat=normal rt=""
    [ "$1" != default ] && lat=high
    [ "$1" = high-rt ] && rt="dedicated_rt_priority = ${RT_PRIO:-50}"
    cat >"$run/sw.toml" <<TOML
[switch]
control = "$run/ctl.sock"
$rt
[[port]]
name = "a"
kind = "vhost-user"
socket = "$run/a.sock"
latency = "$lat"
[[port]]
name = "b"
kind = "vhost-user"
socket = "$run/b.sock"
[[port]]
name = "t"
kind = "tap"
ifname = "$tap"
TOML
    taskset -c 0,1 "$vnio" switch --config "$run/sw.toml" 2>"$run/switch.log" &
    swpid=$!
    pids+=("$swpid")
    for _ in $(seq 100); do [ -S "$run/ctl.sock" ] && break; sleep 0.05; done
    [ -S "$run/ctl.sock" ] || { echo "latency-high: the switch did not start: $(tail -1 "$run/switch.log")" >&2; exit 1; }
    ip link set "$tap" netns "$ns"
    ip -n "$ns" addr add 10.91.0.20/24 dev "$tap"
    ip -n "$ns" link set "$tap" up
    ip -n "$ns" link set lo up
}

stop_switch() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    pids=()
    ip -n "$ns" link del "$tap" 2>/dev/null || true
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
        "$vnio" endpoint "vhost-user:$run/b.sock,ip=10.91.0.11,wait" --cpu 0 2>"$run/ep.log" &
        pids+=($!)
        sleep 0.5
        c0=$(switch_cpu "$swpid")
        doc=$("$vnio" rr -p udp --echo-server -t 10.91.0.11:7 --size 64 -r "$rate" \
            --via "vhost-user:$run/a.sock,ip=10.91.0.10,wait" \
            -d "${secs}s" --warmup 1s --cpu 0 --json 2>"$run/rr.log") ||
            { echo "$kind/$cfg round $r failed: $(tail -1 "$run/rr.log")" >&2; stop_switch; return 0; }
    else
        "$vnio" endpoint "vhost-user:$run/a.sock,ip=10.91.0.10,wait" --cpu 0 2>"$run/ep.log" &
        pids+=($!)
        sleep 0.5
        c0=$(switch_cpu "$swpid")
        doc=$(ip netns exec "$ns" "$vnio" rr -p udp --echo-server -t 10.91.0.10:7 --size 64 -r "$rate" \
            -d "${secs}s" --warmup 1s --cpu 0 --json 2>"$run/rr.log") ||
            { echo "$kind/$cfg round $r failed: $(tail -1 "$run/rr.log")" >&2; stop_switch; return 0; }
    fi
    c1=$(switch_cpu "$swpid")
    # CPU over warm-up and measurement, in % of one core.
    record "$kind" "$cfg" "$r" "$doc" "$(( (c1 - c0) * 100 / hz / (secs + 1) ))"
    stop_switch
}

configs=${CONFIGS:-default high high-rt}
ip netns add "$ns"
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
echo "# latency-high: 64 B UDP round trips at ${rate}/s, ${secs}s x $rounds rounds per configuration;" \
    "switch on CPUs 0-1 (high: dedicated worker CPU 1, shared CPU 0), measuring threads on CPU 0"
python3 "$here/rtt_rows.py" summary "$out"
