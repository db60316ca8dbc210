#!/bin/bash
# Split vs packed virtqueues through `vnio switch`, side by side: the shared
# anchor harness (shared/anchors/run_anchors.sh) with vnio as anchor X, its
# vpair endpoint (one DPDK process, two virtio-user ports) on split rings
# and on packed rings (`packed_vq=1`), alternating run by run, then the
# medians and the ratio packed/split of each pair of runs.
#
#   cargo build --release -p vnio
#   crates/switch/bench/packed.sh [REPS] [SIZES] [DUR]    # defaults: 5, "64 1518", 4
#
# Environment: MEM=nohuge when 2 MiB hugepages cannot be had (the
# harness's knob; slower, but both layouts alike), HARNESS (run_anchors.sh, default ../shared/anchors/ beside
# the repository), W (work directory, default /tmp/vnio-packed-bench),
# PACKED_OPTS (the packed runs' extra virtio-user options, default
# ",packed_vq=1,in_order=1"). Busy-polls both cores while it runs
# (switch pinned on CPU 0, the endpoint on CPU 1).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
HARNESS=${HARNESS:-$root/../shared/anchors/run_anchors.sh}
W=${W:-/tmp/vnio-packed-bench}
REPS=${1:-5}
SIZES=${2:-"64 1518"}
DUR=${3:-4}
PACKED_OPTS=${PACKED_OPTS:-",packed_vq=1,in_order=1"}
[ -f "$HARNESS" ] || { echo "packed.sh: no anchor harness at $HARNESS (set HARNESS)" >&2; exit 1; }
[ -x "${VNIO:-$root/target/release/vnio}" ] || { echo "packed.sh: build the switch first: cargo build --release -p vnio" >&2; exit 1; }
. "$here/env.sh"
mkdir -p "$W/vpair"
# The harness builds its endpoint from $W/vpair/vpair.c.
cp "$(dirname "$HARNESS")/vpair.c" "$W/vpair/vpair.c"
rm -f "$W/results.csv"
for rep in $(seq "$REPS"); do
    for layout in split packed; do
        opts=""
        [ "$layout" = packed ] && opts=$PACKED_OPTS
        # The harness appends QSZ to each endpoint's vdev: the ring layout rides on it.
        W=$W FRESH=0 ANCHORS=X TOPOS=vpair PLACEMENTS=pinned SIZES="$SIZES" REPS="$rep" REP_FROM="$rep" \
            DUR="$DUR" WARM=1 QUIET_MAX=0 QSZ="256$opts" TAG="$layout" \
            X_CMD="$here/anchor-x.sh" X_STATS="$here/anchor-x.sh stats" \
            bash "$HARNESS" > "$W/harness-$layout-$rep.log" 2>&1 ||
            echo "packed.sh: run $layout $rep failed (see $W/harness-$layout-$rep.log)" >&2
    done
done
python3 - "$W/results.csv" <<'PY'
import csv, statistics, sys
rows = list(csv.reader(open(sys.argv[1])))
# tag, topo, anchor, placement, size, rep, rx_mpps, ...
rate = {}
for r in rows:
    if len(r) > 6 and r[0] in ("split", "packed"):
        rate[(r[0], r[4], r[5])] = float(r[6])
for size in sorted({k[1] for k in rate}, key=int):
    reps = sorted({k[2] for k in rate if k[1] == size}, key=int)
    pairs = [(rate[("split", size, p)], rate[("packed", size, p)]) for p in reps
             if ("split", size, p) in rate and ("packed", size, p) in rate]
    if not pairs:
        continue
    s = [a for a, _ in pairs]
    k = [b for _, b in pairs]
    ratios = [b / a for a, b in pairs if a > 0]
    print(f"{size} B: split {statistics.median(s):.3f} Mpps ({min(s):.2f}-{max(s):.2f}), "
          f"packed {statistics.median(k):.3f} Mpps ({min(k):.2f}-{max(k):.2f}), "
          f"packed/split paired ratio median {statistics.median(ratios):.2f} "
          f"(each: {' '.join(f'{x:.2f}' for x in ratios)}; n={len(pairs)})")
PY
