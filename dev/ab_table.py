#!/usr/bin/env python3
"""A/B table of bench runs: DIR/bench-<variant>-r<round>.txt files (bench --shapes ... --columns
a,b[,c], one process per variant and round) side by side, one row per shape and temperature:

    python3 scripts/dev/ab_table.py DIR base dev [--columns ours/into]

Each cell lists the rounds' figures of the chosen columns (µs, "col1/col2" per round)."""
import argparse
import collections
import glob
import re

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("variants", nargs="+")
ap.add_argument("--columns", default="ours/into", help="label of the figures in each cell")
args = ap.parse_args()
ncols = args.columns.count("/") + 1
row = re.compile(r"custom/(hot|cold)\s+(\d+)\s+(\d+)\s+(\d+)" + r"\s+(\S+)" * ncols)
cells = collections.defaultdict(list)
for path in sorted(glob.glob(f"{args.dir}/bench-*-r*.txt")):
    variant = path.rsplit("bench-", 1)[1].rsplit("-r", 1)[0]
    for line in open(path):
        m = row.match(line)
        if m:
            key = (int(m[2]), int(m[3]), int(m[4]), m[1])
            cells[key + (variant,)].append("/".join(m.groups()[4:]))
width = max(30, 12 * ncols + 6)
print(f"{'shape':>18} {'temp':>4} " + " ".join(f"{v + ' ' + args.columns + ' (rounds)':>{width}}" for v in args.variants))
for key in sorted({k[:4] for k in cells}):
    shape = "x".join(map(str, key[:3]))
    print(f"{shape:>18} {key[3]:>4} " + " ".join(f"{' '.join(cells[key + (v,)]):>{width}}" for v in args.variants))
