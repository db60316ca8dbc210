#!/bin/bash
# Two builds of `vnio switch` as anchor X of the shared anchor harness,
# alternated run by run, so a before/after comparison shares the host's
# moods with OVS-DPDK and testpmd (rates here jump between plateaus from
# one run to the next: only runs side by side compare).
#
#   AB_LOG=/tmp/ab.log VNIO_A=/tmp/before/vnio VNIO_B=$CARGO_TARGET_DIR/release/vnio \
#   ANCHORS="X X A B" X_CMD="$PWD/crates/switch/bench/anchor-ab.sh" \
#   X_STATS="$PWD/crates/switch/bench/anchor-x.sh stats" VNIO=$VNIO_B \
#     bash ../shared/anchors/run_anchors.sh
#   crates/switch/bench/anchor-ab.sh summary W   # W: the harness's work directory
#
# Each start appends "N label binary" to AB_LOG (A on odd starts, B on even
# ones); with ANCHORS="X X A B" the first X of every (rep, topology, size)
# is A and the second B. `summary` pairs the harness's X rows with that log
# (refusing when a run failed and the counts differ) and prints medians.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" = summary ]; then
    w=$2
    exec python3 - "$w/results.csv" "$w/latency.csv" "${AB_LOG:?AB_LOG}" <<'PY'
import csv, statistics, sys
res, lat, log = sys.argv[1:4]
labels = [l.split()[1] for l in open(log) if l.strip()]
def rows(path):
    try:
        return list(csv.DictReader(open(path)))
    except FileNotFoundError:
        return []
r, l = rows(res), rows(lat)
# The harness writes results in run order; X runs of both files interleave
# in the order the switch was started.
xs = [("rate", x) for x in r if x["anchor"] == "X"] + [("lat", x) for x in l if x["anchor"] == "X"]
order = {id(x): i for i, x in enumerate(r + l)}
if len(xs) != len(labels):
    sys.exit(f"anchor-ab: {len(labels)} starts logged but {len(xs)} X rows: a run failed, pairing is unsafe")
# Rows of the two CSVs are in run order within each file; the log is in run
# order across both. Merge by the harness's loop order: rate rows of a
# (rep, size) come before lat rows of the same rep, so sort by (rep, topo
# position, size) as run_anchors.sh does.
def key(kind_row):
    kind, x = kind_row
    return (int(x["rep"]), 0 if kind == "rate" else 1, int(x["size"]))
xs.sort(key=key)
tagged = {}
for (kind, x), lab in zip(xs, labels):
    tagged.setdefault((kind, x["size"], lab), []).append(x)
others = {}
for x in r:
    if x["anchor"] != "X":
        others.setdefault(("rate", x["size"], x["anchor"]), []).append(float(x["rx_mpps"]))
for x in l:
    if x["anchor"] != "X":
        others.setdefault(("lat", x["size"], x["anchor"]), []).append(float(x["rtt_us_p50"]))
med = statistics.median
for size in sorted({k[1] for k in tagged}, key=int):
    line = [f"{size} B"]
    for lab in ("A", "B"):
        v = tagged.get(("rate", size, lab))
        if v:
            line.append(f"vnio {lab}: {med(float(x['rx_mpps']) for x in v):.3f} Mpps (n={len(v)})")
    for a, name in (("A", "OVS-DPDK"), ("B", "testpmd")):
        v = others.get(("rate", size, a))
        if v:
            line.append(f"{name}: {med(v):.3f} Mpps")
    print("rate  " + ", ".join(line))
    line = [f"{size} B"]
    for lab in ("A", "B"):
        v = tagged.get(("lat", size, lab))
        if v:
            line.append(f"vnio {lab}: p50 {med(float(x['rtt_us_p50']) for x in v):.2f} us p99 {med(float(x['rtt_us_p99']) for x in v):.2f} us (n={len(v)})")
    for a, name in (("A", "OVS-DPDK"), ("B", "testpmd")):
        v = others.get(("lat", size, a))
        if v:
            line.append(f"{name}: p50 {med(v):.2f} us")
    if len(line) > 1:
        print("rtt   " + ", ".join(line))
PY
fi
log=${AB_LOG:?AB_LOG: where to record which build each start ran}
n=$(($(wc -l <"$log" 2>/dev/null || echo 0) + 1))
if [ $((n % 2)) = 1 ]; then label=A bin=${VNIO_A:?}; else label=B bin=${VNIO_B:?}; fi
echo "$n $label $bin" >>"$log"
echo "anchor-ab: start $n runs build $label ($bin)" >&2
VNIO=$bin exec "$here/anchor-x.sh"
