"""An independent check of vnio's percentile confidence intervals.

Reads the JSON the Rust test `interval_scipy.rs` writes: histograms in
HdrHistogram's V2 compressed encoding (decoded here by Python's `hdrh`) and
the intervals vnio computed from them. Recomputes each interval with scipy's
binomial distribution: the equal-tailed ranks j < k (1-based order
statistics) with F(j-1) <= alpha/2 < F(j) and F(k-2) < 1-alpha/2 <= F(k-1),
and reads the bounds from the decoded histogram (the lowest value equivalent
to the j-th sample's bucket, the highest equivalent to the k-th's). Ranks must
be equal, bounds within one histogram bucket; where the two-sided interval
does not exist, vnio must say "too few samples".

Prints one line per case and "checked N intervals"; exits 1 on a mismatch.
"""

import json
import sys

from hdrh.histogram import HdrHistogram
from scipy.stats import binom


def value_at_rank(h, rank):
    seen = 0
    for it in h.get_recorded_iterator():
        seen += it.count_at_value_iterated_to
        if seen >= rank:
            return it.value_iterated_to
    raise ValueError(f"rank {rank} beyond {seen} samples")


def ranks(n, p, confidence):
    """The equal-tailed ranks, or None when no two-sided interval exists."""
    t = (1.0 - confidence) / 2.0
    if binom.cdf(0, n, p) > t or binom.sf(n - 1, n, p) > t:
        return None
    # j - 1: the largest x with F(x) <= t.
    x = int(binom.ppf(t, n, p))
    while binom.cdf(x, n, p) > t:
        x -= 1
    while binom.cdf(x + 1, n, p) <= t:
        x += 1
    j = x + 1
    # k - 1: the smallest x with F(x) >= 1 - t, i.e. P(B > x) <= t.
    y = int(binom.isf(t, n, p))
    while binom.sf(y, n, p) > t:
        y += 1
    while y > 0 and binom.sf(y - 1, n, p) <= t:
        y -= 1
    return j, y + 1


def bucket(h, v):
    return h.get_highest_equivalent_value(v) - h.get_lowest_equivalent_value(v) + 1


def main():
    cases = json.load(open(sys.argv[1]))
    failures, checked = [], 0
    for case in cases:
        h = HdrHistogram.decode(case["hdr_v2_deflate_b64"])
        n = h.get_total_count()
        if n != case["count"]:
            failures.append(f"{case['name']}: hdrh reads {n} samples, vnio {case['count']}")
            continue
        for iv in case["intervals"]:
            p, conf = iv["p"], iv["confidence"]
            want = ranks(n, p, conf)
            what = f"{case['name']} n={n} p={p}"
            checked += 1
            if want is None:
                if iv.get("too_few") is None or iv.get("lo_ns") is not None:
                    failures.append(f"{what}: scipy has no interval, vnio has {iv}")
                continue
            got = iv.get("ranks")
            if got is None or tuple(got) != want:
                failures.append(f"{what}: ranks scipy {want} vnio {got}")
                continue
            lo_v, hi_v = value_at_rank(h, want[0]), value_at_rank(h, want[1])
            lo = h.get_lowest_equivalent_value(lo_v)
            hi = h.get_highest_equivalent_value(hi_v)
            if abs(lo - iv["lo_ns"]) > bucket(h, lo_v) or abs(hi - iv["hi_ns"]) > bucket(h, hi_v):
                failures.append(f"{what}: bounds scipy [{lo}, {hi}] vnio [{iv['lo_ns']}, {iv['hi_ns']}]")
                continue
            print(f"{what}: ranks {want} bounds [{lo}, {hi}] agree")
    for f in failures:
        print("MISMATCH", f, file=sys.stderr)
    print(f"checked {checked} intervals")
    sys.exit(1 if failures else 0)


main()
