#!/usr/bin/env bash
# Round trips added by a vhost-user switch, measured with vnio's own
# kernel-bypass endpoints on both sides, the same for every switch:
#
#   vnio rr --via (poll-mode virtio driver on port a, busy-polls, CPU 0)
#     -> switch (one busy-polling core, CPU 1) -> port b -> a second
#     poll-mode endpoint (--via-echo, a UDP echo responder served by the same
#     thread) -> back the same way: two switch traversals per round trip,
#     no kernel and no wake-up anywhere (DPDK's two-port ping-pong shape).
#
# Switches, interleaved round by round: vnio switch, dpdk-testpmd io-forward
# with two net_vhost ports, OVS-DPDK 3.1 (port-to-port flows). Prints p50,
# p99, p99.99 per switch (median over rounds) and the ratio to vnio.
#
#   crates/switch/bench/endpoint-rtt.sh [ROUNDS] [SECONDS]
#   SWITCHES="vnio testpmd" crates/switch/bench/endpoint-rtt.sh 5 5
#   VNIO_BASE=/tmp/old/vnio SWITCHES="base vnio testpmd ovs" crates/switch/bench/endpoint-rtt.sh 3 5
#     ("base": another build of vnio's switch, e.g. before a change; the
#     endpoints are always $VNIO's, so only the switch differs)
#
# Placement: switch on CPU 1, both endpoints in one thread on CPU 0 (two
# busy-polling processes on one CPU would starve each other). Compare
# ratios, not absolutes: this host's rates move between plateaus.
# Needs root (DPDK, OVS).
set -euo pipefail
rounds=${1:-3}
secs=${2:-5}
switches=${SWITCHES:-vnio testpmd ovs}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
vnio=${VNIO:-$root/target/release/vnio}
run=$(mktemp -d /tmp/vnio-rtt.XXXXXX)
out=${OUT:-$root/results/endpoint-rtt-$(date +%Y%m%d-%H%M%S).csv}
mkdir -p "$(dirname "$out")"
pids=()

cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    sleep 0.5
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    if [ -f "$run/ovs/ovs-vswitchd.pid" ]; then
        ovs-appctl -t "$run/ovs/ovs-vswitchd.ctl" exit >/dev/null 2>&1 || true
        kill "$(cat "$run/ovs/ovs-vswitchd.pid")" 2>/dev/null || true
    fi
    [ -f "$run/ovs/ovsdb-server.pid" ] && kill "$(cat "$run/ovs/ovsdb-server.pid")" 2>/dev/null || true
    rm -rf "$run" /var/run/dpdk/vnio_rtt_*
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[ -x "$vnio" ] || { echo "endpoint-rtt: build first: cargo build --release -p vnio" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "endpoint-rtt: needs root (DPDK and OVS)" >&2; exit 1; }

start_base() {
    [ -x "${VNIO_BASE:-}" ] || { echo "skip base: VNIO_BASE is not an executable"; return 1; }
    switch_bin=$VNIO_BASE start_vnio
}

start_vnio() {
    cat >"$run/sw.toml" <<TOML
[switch]
control = "$run/ctl.sock"
idle_polls = 4294967295
[[port]]
name = "a"
kind = "vhost-user"
socket = "$run/a.sock"
[[port]]
name = "b"
kind = "vhost-user"
socket = "$run/b.sock"
TOML
    taskset -c 1 "${switch_bin:-$vnio}" switch --config "$run/sw.toml" 2>"$run/switch.log" &
    pids+=($!)
    mode=connect
}

start_testpmd() {
    command -v dpdk-testpmd >/dev/null || { echo "skip testpmd: no dpdk-testpmd (apt install dpdk-dev)"; return 1; }
    mkfifo "$run/tp.fifo"
    exec {tpfd}<>"$run/tp.fifo"
    taskset -c 1 stdbuf -oL dpdk-testpmd --lcores 0@1,1@1 --no-pci --no-huge -m 1024 \
        --file-prefix vnio_rtt_tp \
        --vdev "net_vhost0,iface=$run/a.sock,queues=1" --vdev "net_vhost1,iface=$run/b.sock,queues=1" \
        -- -i --nb-cores=1 --forward-mode=io --total-num-mbufs=16384 <"$run/tp.fifo" >"$run/tp.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 300); do grep -q 'testpmd>' "$run/tp.log" && break; sleep 0.1; done
    echo start >&"$tpfd"
    mode=connect
}

start_ovs() {
    [ -x /usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk ] || { echo "skip ovs: apt install openvswitch-switch-dpdk"; return 1; }
    local d=$run/ovs vsctl="ovs-vsctl --db=unix:$run/ovs/db.sock --timeout=30"
    mkdir -p "$d"
    export OVS_RUNDIR=$d OVS_LOGDIR=$d OVS_DBDIR=$d OVS_SYSCONFDIR=$d
    ovsdb-tool create "$d/conf.db" /usr/share/openvswitch/vswitch.ovsschema
    ovsdb-server "$d/conf.db" --remote="punix:$d/db.sock" --pidfile="$d/ovsdb-server.pid" \
        --unixctl="$d/ovsdb-server.ctl" --log-file="$d/ovsdb-server.log" --detach
    $vsctl --no-wait init
    $vsctl --no-wait set Open_vSwitch . other_config:dpdk-init=true \
        other_config:dpdk-extra="--no-huge -m 2048 --legacy-mem --file-prefix vnio_rtt_ovs --no-pci" \
        other_config:pmd-cpu-mask=0x2
    taskset -c 1 /usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk "unix:$d/db.sock" \
        --pidfile="$d/ovs-vswitchd.pid" --unixctl="$d/ovs-vswitchd.ctl" \
        --log-file="$d/ovs-vswitchd.log" --detach -vconsole:off
    $vsctl add-br br0 -- set bridge br0 datapath_type=netdev
    $vsctl add-port br0 a -- set Interface a type=dpdkvhostuserclient \
        options:vhost-server-path="$run/a.sock" ofport_request=1
    $vsctl add-port br0 b -- set Interface b type=dpdkvhostuserclient \
        options:vhost-server-path="$run/b.sock" ofport_request=2
    ovs-ofctl del-flows br0
    ovs-ofctl add-flow br0 in_port=1,actions=output:2
    ovs-ofctl add-flow br0 in_port=2,actions=output:1
    mode=listen
}

stop_switch() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    pids=()
    if [ -f "$run/ovs/ovs-vswitchd.pid" ]; then
        ovs-appctl -t "$run/ovs/ovs-vswitchd.ctl" exit >/dev/null 2>&1 || true
        sleep 0.5
        kill "$(cat "$run/ovs/ovsdb-server.pid")" 2>/dev/null || true
    fi
    rm -rf "$run"/* /var/run/dpdk/vnio_rtt_*
}

one() {   # one SWITCH ROUND: prints "switch,round,p50,p99,p9999,ops" to $out
    local sw=$1 r=$2 lopt="" doc
    "start_$sw" || return 0
    [ "$mode" = listen ] && lopt=",listen"
    doc=$(taskset -c 0 "$vnio" rr -p udp --echo-server -t 10.90.0.9:7 --size 64 \
        --via "vhost-user:$run/a.sock,ip=10.90.0.5$lopt" --via-echo "vhost-user:$run/b.sock,ip=10.90.0.9$lopt" \
        -d "${secs}s" --warmup 1s --cpu 0 --json 2>"$run/rr.log") || {
        echo "$sw round $r failed: $(tail -1 "$run/rr.log")" >&2; stop_switch; return 0; }
    python3 -c '
import json, sys
d = json.loads(sys.argv[3]); m = d["iterations"][d["chosen"]]["merged"]; l = m["latency"]
print(",".join(map(str, [sys.argv[1], sys.argv[2], l["p50_ns"], l["p99_ns"], l["p9999_ns"], m["ops"]])))' \
        "$sw" "$r" "$doc" >>"$out"
    stop_switch
}

echo "switch,round,p50_ns,p99_ns,p9999_ns,ops" >"$out"
for r in $(seq "$rounds"); do
    for sw in $switches; do
        echo "round $r: $sw" >&2
        one "$sw" "$r"
    done
done

echo "# environment: $(uname -r), clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)," \
    "$(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); switch on CPU 1, endpoints on CPU 0; 64 B UDP, ${secs}s x $rounds rounds"
python3 - "$out" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
by = {}
for r in rows:
    by.setdefault(r["switch"], []).append(r)
med = {s: {k: statistics.median(int(x[k]) for x in v) for k in ("p50_ns", "p99_ns", "p9999_ns")} for s, v in by.items()}
print(f"{'switch':<10} {'rounds':>6} {'p50 us':>8} {'p99 us':>8} {'p99.99 us':>10} {'p50/vnio':>9} {'p99/vnio':>9}")
base = med.get("vnio")
for s, m in med.items():
    ratio = lambda k: f"{m[k] / base[k]:.2f}" if base else "-"
    print(f"{s:<10} {len(by[s]):>6} {m['p50_ns']/1e3:>8.1f} {m['p99_ns']/1e3:>8.1f} {m['p9999_ns']/1e3:>10.1f} {ratio('p50_ns'):>9} {ratio('p99_ns'):>9}")
PY
echo "# rows: $out"
