#!/usr/bin/env python3
"""Rows and summary for the round-trip benches (latency-high.sh, latency-modes.sh).

  rtt_rows.py row KIND CONFIG ROUND CPU_PCT JSON   prints one CSV row from `vnio rr --json`
  rtt_rows.py summary CSV                          medians per (endpoints, config), ratios to default

One CSV: kind,config,round,p50_ns,p99_ns,p9999_ns,ops,switch_cpu_pct.
"""
import csv
import json
import statistics
import sys

HEADER = "kind,config,round,p50_ns,p99_ns,p9999_ns,ops,switch_cpu_pct"


def row(kind, config, rnd, cpu, doc):
    d = json.loads(doc)
    m = d["iterations"][d["chosen"]]["merged"]
    lat = m["latency"]
    print(",".join(map(str, [kind, config, rnd, lat["p50_ns"], lat["p99_ns"], lat["p9999_ns"], m["ops"], cpu])))


def summary(path):
    by = {}
    for r in csv.DictReader(open(path)):
        by.setdefault((r["kind"], r["config"]), []).append(r)
    print(f"{'endpoints':<10} {'config':<8} {'rounds':>6} {'p50 us':>8} {'p99 us':>8} {'p99.99 us':>10} {'switch CPU %':>13}")
    res = {}
    for (kind, cfg), v in sorted(by.items()):
        m = {k: statistics.median(float(x[k]) for x in v) for k in ("p50_ns", "p99_ns", "p9999_ns", "switch_cpu_pct")}
        res[(kind, cfg)] = m
        print(f"{kind:<10} {cfg:<8} {len(v):>6} {m['p50_ns']/1e3:>8.1f} {m['p99_ns']/1e3:>8.1f} "
              f"{m['p9999_ns']/1e3:>10.1f} {m['switch_cpu_pct']:>13.0f}")
    for (kind, cfg), h in sorted(res.items()):
        d = res.get((kind, "default"))
        if d and cfg != "default":
            print(f"{kind}: {cfg}/default p50 {h['p50_ns']/d['p50_ns']:.2f}, p99 {h['p99_ns']/d['p99_ns']:.2f}, "
                  f"p99.99 {h['p9999_ns']/d['p9999_ns']:.2f}; switch CPU {d['switch_cpu_pct']:.0f}% -> {h['switch_cpu_pct']:.0f}%")


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "row":
        row(*sys.argv[2:])
    elif len(sys.argv) == 3 and sys.argv[1] == "summary":
        summary(sys.argv[2])
    elif len(sys.argv) == 2 and sys.argv[1] == "header":
        print(HEADER)
    else:
        sys.exit(__doc__)
