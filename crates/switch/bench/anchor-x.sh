#!/bin/bash
# Runs `vnio switch` as anchor X of the shared anchor harness
# (shared/anchors/run_anchors.sh), so vnio is measured with exactly the same
# endpoints, placements and counters as OVS-DPDK (A) and testpmd (B):
#
#   cargo build --release -p vnio
#   ANCHORS="X A B" X_CMD="$PWD/crates/switch/bench/anchor-x.sh" \
#     X_STATS="$PWD/crates/switch/bench/anchor-x.sh stats" bash ../shared/anchors/run_anchors.sh
#
# The harness sets SOCK_A, SOCK_B, RUNDIR (and X_MODE: server, the default,
# or client). The worker busy-polls (idle_polls at its maximum), as the
# DPDK switches do; the harness pins the whole process with taskset.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
VNIO=${VNIO:-$here/../../../target/release/vnio}
ctl=$RUNDIR/vnio-switch.sock
if [ "${1:-}" = stats ]; then
    # "rx=N tx=N drop=N": frames the switch took in, delivered, and dropped.
    "$VNIO" switch --control "$ctl" --json port stats | python3 -c '
import json, sys
ports = json.load(sys.stdin).values()
rx = sum(p["tx"]["packets"] for p in ports)
tx = sum(p["rx"]["packets"] for p in ports)
drop = sum(sum(p[d]["drops"].values()) for p in ports for d in ("tx", "rx"))
print(f"rx={rx} tx={tx} drop={drop}")'
    exit 0
fi
mode=${X_MODE:-server}
cat > "$RUNDIR/vnio-switch.toml" <<TOML
[switch]
control = "$ctl"
idle_polls = 4294967295

[[port]]
name = "a"
kind = "vhost-user"
socket = "$SOCK_A"
mode = "$mode"

[[port]]
name = "b"
kind = "vhost-user"
socket = "$SOCK_B"
mode = "$mode"
TOML
exec "$VNIO" switch --config "$RUNDIR/vnio-switch.toml"
