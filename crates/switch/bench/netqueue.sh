#!/bin/bash
# Head-of-line blocking on a shared uplink receive queue vs a queue per vNIC
# (the studies' NetQueue experiment), both configurations side by side at
# each neighbour flood rate, in one run (root):
#
#   crates/switch/bench/netqueue.sh            # STEPS=8 SECS=3 (per cell)
#   AUTOGROUP_NICE=-15 ...                     # see uplink-rate.sh
#
# A latency vNIC (poll-mode endpoint) pings a peer namespace (the kernel's
# ICMP echo) across the uplink, one echo every PING_US µs, while a neighbour
# vNIC receives 256-byte UDP frames from that namespace at 0 to the highest
# rate the generator reaches here, in STEPS steps. Per cell: the rate
# offered and delivered to the neighbour, the frames the kernel dropped at
# the uplink's full rings, the probe's p50/p90/p99 round trip (µs) and the
# probes lost (no answer within 50 ms). First the two rates that decide
# whether a backlog builds: the generator's into the switch's ring and the
# switch's out of it (switch stopped, then let go).
#
# The switch is pinned to CPU 0 and busy-polls; the generator has its own
# thread on CPU 1; the probe sleeps on CPU 0 under SCHED_FIFO.
#   NEIGHBOUR=tap    the neighbour is a tap port with a kernel UDP socket
#                    (frees the generator's CPU from draining it)
#   BUDGET=8         the switch's frames per port (uplink: per queue) per
#                    round (default 64): how long a round a frame may wait
#   LATENCY_HIGH=1   the latency port is latency-high: its worker has CPU 1,
#                    where the probe sleeps; the switch's shared worker and
#                    the generator share CPU 0. On its own queue the port's
#                    worker serves that queue itself (the uplink lends it),
#                    so its frames never cross the flooded shared worker.
#   SHARE=20         leave the switch 20% of CPU 0 (a SCHED_FIFO thread
#                    takes the rest of every 100 µs): a switch whose
#                    capacity is below the generator's, as in the studies
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
old_nice=$(sed 's/.* nice //' /proc/self/autogroup)
trap '[ -z "${AUTOGROUP_NICE:-}" ] || echo "$old_nice" > /proc/self/autogroup' EXIT
(cd "$root" && nice -n 19 cargo build --release --locked -q -p vnio \
    && nice -n 19 cargo build --release --locked -q -p vnio-switch --example netqueue_hol)
[ -z "${AUTOGROUP_NICE:-}" ] || echo "$AUTOGROUP_NICE" > /proc/self/autogroup
echo "== environment"
echo "kernel $(uname -r); $(nproc) CPUs; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "vnio $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo +dirty); autogroup $(cat /proc/self/autogroup); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "steps=${STEPS:-8} secs=${SECS:-3} ping every ${PING_US:-200} us; 256-byte UDP flood in bursts of ${BURST:-32}; neighbour ${NEIGHBOUR:-vhost-user}; switch share ${SHARE:-100}%; budget ${BUDGET:-64} frames per queue per round, in turns of 8"
if [ -n "${LATENCY_HIGH:-}" ]; then
    placement=(--latency-high 1 --cpu 0); wrap=0
    echo "latency port latency-high on CPU 1 (with the probe); shared worker and generator on CPU 0"
else
    placement=(); wrap=1
fi
echo "== results (round trips in µs)"
taskset -c $wrap "$target/release/examples/netqueue_hol" "${placement[@]}" --vnio "$target/release/vnio" \
    --steps "${STEPS:-8}" --secs "${SECS:-3}" --ping-us "${PING_US:-200}" --burst "${BURST:-32}" \
    --neighbour "${NEIGHBOUR:-vhost-user}" --switch-share "${SHARE:-100}" --budget "${BUDGET:-64}" ${MAX_KPPS:+--max-kpps $MAX_KPPS}
