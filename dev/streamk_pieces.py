#!/usr/bin/env python3
"""Per-piece timeline of stream-K launches from a `bench --trace-out FILE` trace (a build with
the cargo feature `trace`; stream-K CTAs write one tile record per piece, i.e. per
tile whose K blocks they hold):

    python3 dev/streamk_pieces.py FILE [--launches 8]

For the last N launches, groups the CTAs by their number of pieces and the size of their first
piece (K blocks) and prints medians (µs from the launch's first CTA entry): each piece's start,
its first K block landed, its last K block done, past the math warps' wait (before the fix-up)
and its end (published or stored); then the CTA's end.
"""
import argparse
import math
import os
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(__file__))
from trace_timeline import launches, load  # noqa: E402

TILE = 10


def median(values):
    """Median of the values that are numbers (NaN: the mark was not reached), or NaN."""
    v = [x for x in values if not math.isnan(x)]
    return statistics.median(v) if v else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--launches", type=int, default=8)
    a = ap.parse_args()
    recs = load(a.file)
    ctas = [r for r in recs if r[2] != TILE]
    tiles = [r for r in recs if r[2] == TILE]
    ls = [l for l in launches(ctas) if l.tag == 1][-a.launches - 1 : -1]
    if not ls:
        sys.exit("no GEMM launches in the trace")
    # A piece belongs to the CTA of the same index on the same SM whose lifetime holds its start
    # (chained launches overlap: the next launch's CTA b may run elsewhere meanwhile).
    by_cta = defaultdict(list)
    for t0, _unit, _tag, d, sm, cta in tiles:
        by_cta[(cta & 0xFFFF, sm)].append((t0, d, cta >> 16))
    groups = defaultdict(list)
    for l in ls:
        base = l.first_entry
        for t0, d, sm, cta in l.ctas:
            end = t0 + d[3]
            pieces = sorted(p for p in by_cta[(cta, sm)] if t0 <= p[0] <= end)
            if not pieces:
                continue
            key = (len(pieces), pieces[0][2] & 0xFF)
            row = []
            for p0, pd, _info in pieces:
                row += [(p0 - base) / 1e3] + [((p0 + x) - base) / 1e3 if x else float("nan") for x in pd]
            row.append((end - base) / 1e3)
            groups[key].append(row)
    cols = ["start", "landed", "loop", "waited", "end"]
    print(f"{len(ls)} launches; per (pieces, first piece's K blocks): medians in µs from the launch's first entry")
    for key in sorted(groups):
        rows = groups[key]
        med = [median(col) for col in zip(*rows)]  # rows of one key have the same length
        parts = []
        for p in range(key[0]):
            parts.append("p%d[" % (p + 1) + " ".join(f"{c} {med[5 * p + j]:6.2f}" for j, c in enumerate(cols)) + "]")
        print(f"pieces {key[0]} first {key[1]:3d} kb n {len(rows):4d}: " + " ".join(parts) + f" cta end {med[-1]:6.2f}")


if __name__ == "__main__":
    main()
