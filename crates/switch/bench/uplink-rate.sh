#!/bin/bash
# Packet rate through an uplink port, both directions, before and after a
# change, interleaved in one run (rates on this shared host move between
# plateaus: compare ratios within a run, never absolutes across runs).
#
#   crates/switch/bench/uplink-rate.sh [BEFORE_REV]   (root; default BEFORE_REV: HEAD~1)
#   RUNS=5 SECS=3 LEN=60 ...
#   AUTOGROUP_NICE=-15   raises this session's scheduler group for the run
#                        (other sessions' builds otherwise take most of the
#                        CPU whatever the bench's nice value; restored at exit)
#
# The switch busy-polls (idle_polls at its maximum, as the DPDK switches do).
# Wire->vNIC is bounded by the sender here: the kernel delivers a frame into
# the switch's socket in the sender's system call, on the driver's core.
# Builds `vnio` at BEFORE_REV (from `git archive`, in its own target
# directory) and at the work tree, then runs examples/uplink_rate.rs for
# each in turn: the switch pinned to CPU 0, the traffic driver to CPU 1.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
before=${1:-HEAD~1}
runs=${RUNS:-5}
secs=${SECS:-3}
len=${LEN:-60}
target=${CARGO_TARGET_DIR:-$root/target}
btarget=${BEFORE_TARGET_DIR:-$target-before}
rev=$(git -C "$root" rev-parse --short "$before")
src=$(mktemp -d)
old_nice=$(sed 's/.* nice //' /proc/self/autogroup)
trap 'rm -rf "$src"; [ -z "${AUTOGROUP_NICE:-}" ] || echo "$old_nice" > /proc/self/autogroup' EXIT
git -C "$root" archive "$rev" | tar -x -C "$src"
# Fresh times: the archive carries the commit's, which cargo would take for
# older than a previous build of another revision in the same target directory.
find "$src" -type f -exec touch {} +
echo "== building vnio at $rev (before) and at the work tree (after)"
(cd "$src" && CARGO_TARGET_DIR=$btarget nice -n 10 cargo build --release --locked -q -p vnio)
(cd "$root" && CARGO_TARGET_DIR=$target nice -n 10 cargo build --release --locked -q -p vnio \
    && CARGO_TARGET_DIR=$target nice -n 10 cargo build --release --locked -q -p vnio-switch --example uplink_rate)
[ -z "${AUTOGROUP_NICE:-}" ] || echo "$AUTOGROUP_NICE" > /proc/self/autogroup
echo "== environment"
echo "kernel $(uname -r); $(nproc) CPUs; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "after: $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo +dirty); before: $rev"
echo "runs=$runs secs=$secs len=$len; switch on CPU 0 (busy-polling), driver on CPU 1; autogroup $(cat /proc/self/autogroup); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== results"
for r in $(seq "$runs"); do
    for v in before after after-bypass; do
        case $v in
            before) bin=$btarget/release/vnio; extra= ;;
            after) bin=$target/release/vnio; extra= ;;
            after-bypass) bin=$target/release/vnio; extra=--qdisc-bypass ;;
        esac
        taskset -c 1 "$target/release/examples/uplink_rate" --vnio "$bin" --label "run$r $v" \
            --secs "$secs" --len "$len" --idle-polls 4294967295 $extra
    done
done
