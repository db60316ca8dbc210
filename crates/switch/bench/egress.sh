#!/bin/bash
# Egress shares and limits on an uplink (the studies' Network I/O Control),
# measured by the integration test tests/egress.rs, RUNS times (root):
#
#   crates/switch/bench/egress.sh          # RUNS=5
#
# Each run: a veth, an uplink with capacity_mbps = 100, two vNICs (poll-mode
# endpoints, 4096-frame rings) sending 1514-byte frames as fast as their
# rings take them, shares 100:300, 2 s measured at the far end of the veth
# by source MAC; then the first port alone with a 20 Mbit/s limit set live.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
(cd "$root" && nice -n 10 cargo test --release --locked -q -p vnio-switch --test egress --no-run 2>/dev/null)
echo "== environment"
echo "kernel $(uname -r); $(nproc) CPUs; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "vnio $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo +dirty); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== results"
for r in $(seq "${RUNS:-5}"); do
    (cd "$root" && cargo test --release --locked -q -p vnio-switch --test egress -- --nocapture 2>&1) \
        | grep -E 'Mbit/s:|test result' | sed "s/^/run$r /"
done
