#!/usr/bin/env python3
"""One-line-per-row summaries of dev-tool logs for the tail of a device call's output.

    python3 scripts/dev/summarize.py sweep FILE    # harness.py sweep: per shape, auto then the
                                                   # other configs fastest first (hot / cold µs)
    python3 scripts/dev/summarize.py ingest3 FILE  # ingest_bench table 3: GB/s per SM, hot / cold
"""
import collections
import sys


def sweep(path):
    rows = collections.defaultdict(dict)
    for line in open(path):
        p = line.split()
        if len(p) == 7 and p[0] == "SWEEP" and p[1] != "M":
            rows[f"{p[1]}x{p[2]}x{p[3]}"][p[4]] = (float(p[5]), float(p[6]))
    for shape, d in rows.items():
        a = d.get("auto", (float("nan"),) * 2)
        rest = sorted(((k, v) for k, v in d.items() if k != "auto"), key=lambda kv: kv[1][0])
        print(shape, f"auto={a[0]:.2f}/{a[1]:.2f} |", " ".join(f"{k.removeprefix('small_m')}={v[0]:.2f}/{v[1]:.2f}" for k, v in rest))


def ingest3(path):
    d = collections.OrderedDict()
    for line in open(path):
        p = line.split()
        if len(p) == 9 and p[0] == "INGEST3" and p[1] != "box":
            d.setdefault((p[1], p[2], p[3], p[4]), {})[p[5]] = p[8]
    print("ING box KB stages per_sm GBps/SM hot cold")
    for k, v in d.items():
        print("ING", *k, v.get("hot"), v.get("cold"))


if __name__ == "__main__":
    {"sweep": sweep, "ingest3": ingest3}[sys.argv[1]](sys.argv[2])
