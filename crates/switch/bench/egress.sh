#!/bin/bash
# Egress shares and limits on an uplink (the studies' Network I/O Control),
# measured by the integration test tests/egress.rs, RUNS times (root):
#
#   crates/switch/bench/egress.sh          # RUNS=8
#   AUTOGROUP_NICE=-15 ...                 # see uplink-rate.sh
#
# Each run: a veth, an uplink with capacity_mbps = 100, two vNICs (poll-mode
# endpoints, 8192-frame rings) sending 1514-byte frames as fast as their
# rings take them, shares 100:300, 3 s counted at the far end of the veth by
# source MAC and kernel receive timestamp; the rings drain; then the first
# port alone with a 20 Mbit/s limit set live, 3 s. Per run: both rates of
# the split and their ratio, the limited rate, the load average at the end.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
old_nice=$(sed 's/.* nice //' /proc/self/autogroup)
trap '[ -z "${AUTOGROUP_NICE:-}" ] || echo "$old_nice" > /proc/self/autogroup' EXIT
(cd "$root" && nice -n 10 cargo test --release --locked -q -p vnio-switch --test egress --no-run 2>/dev/null)
[ -z "${AUTOGROUP_NICE:-}" ] || echo "$AUTOGROUP_NICE" > /proc/self/autogroup
echo "== environment"
echo "kernel $(uname -r); $(nproc) CPUs; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "vnio $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo +dirty); autogroup $(cat /proc/self/autogroup); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== results"
for r in $(seq "${RUNS:-8}"); do
    out=$(cd "$root" && cargo test --release --locked -q -p vnio-switch --test egress -- --nocapture 2>&1 || true)
    echo "$out" | grep -E 'Mbit/s|host stopped|test result|panicked at .*egress.rs' | sed "s/^/run$r /"
    echo "run$r load $(cut -d' ' -f1 /proc/loadavg)"
done
