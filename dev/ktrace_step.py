#!/usr/bin/env python3
"""Where a decode step's time goes, from a kernel timeline (dev/ktrace.c CSV).

    python3 dev/ktrace_step.py trace.csv [--steps N] [--layer]

Steps are delimited by the greedy argmax kernel (one per step). For the last N complete
steps: wall time, time some GEMM runs ("GEMM busy"), time only non-GEMM kernels run (split by
the kernel that started first among those running: the one the others wait for), and idle
time (no kernel at all). --layer prints one layer's kernels with start offsets and gaps.
"""
import argparse
import collections
import csv
import re
import shutil
import subprocess

KINDS = [
    ("gemm", r"sm90_fp8_gemm"),
    ("reduce", r"splitk_reduce"),
    ("attention", r"decode_attention_kernel"),
    ("combine", r"decode_combine"),
    ("qk_norm_rope", r"qk_norm_rope"),
    ("add_rmsnorm_quant", r"add_rmsnorm_quant"),
    ("swiglu_quant", r"swiglu_quant"),
    ("argmax", r"argmax_rows"),
    ("quantize", r"quantize_act|quant_kernel"),
    ("lm_head", r"nvjet|gemm|sm90_xmma|cutlass"),
]


def kind(name):
    for k, pat in KINDS:
        if re.search(pat, name):
            return k
    return "other"


def demangle(names):
    if not shutil.which("c++filt"):
        return {n: n for n in names}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
    return dict(zip(names, out))


def gemm_label(name, grid):
    """A GEMM launch named by its kernel template and grid (which tells the shapes apart)."""
    m = re.search(r"<fp8gemm::(\w+)<([\d, ]+)>, (\d)>", name)
    tmpl = f"{m.group(1)}<{m.group(2)}>/{m.group(3)}" if m else name[:40]
    return f"{tmpl} grid {grid}"


def g_of(ks, s, e):
    for s2, e2, g, k, n in ks:
        if s2 == s and e2 == e:
            return g
    return 0


def union(intervals):
    total, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--layer", action="store_true")
    a = ap.parse_args()
    rows = []
    for r in csv.reader(open(a.csv)):
        if len(r) < 9:
            continue
        name = ",".join(r[8:])
        rows.append((int(r[0]), int(r[1]), int(r[3]) * int(r[4]) * int(r[5]), name))
    rows.sort()
    names = demangle(sorted({r[3] for r in rows}))
    ks = [(s, e, g, kind(names[n]), names[n]) for s, e, g, n in rows]
    arg_ends = [e for s, e, g, k, n in ks if k == "argmax"]
    if len(arg_ends) < 3:
        raise SystemExit("fewer than 3 argmax kernels: no complete decode step in the trace")
    windows = list(zip(arg_ends[:-1], arg_ends[1:]))[-a.steps:]
    tot = collections.Counter()
    exposed = collections.Counter()
    summed = collections.Counter()
    counts = collections.Counter()
    for t0, t1 in windows:
        inside = [(max(s, t0), min(e, t1), k) for s, e, g, k, n in ks if e > t0 and s < t1]
        wall = t1 - t0
        gemm = union([(s, e) for s, e, k in inside if k == "gemm"])
        busy = union([(s, e) for s, e, k in inside])
        tot["wall"] += wall
        tot["gemm busy"] += gemm
        tot["busy"] += busy
        for s, e, k in inside:
            summed[k] += e - s
            counts[k] += 1
        # Elementary intervals without a GEMM: charge the earliest-started running kernel.
        pts = sorted({p for s, e, k in inside for p in (s, e)})
        starts = sorted(inside)
        for lo, hi in zip(pts[:-1], pts[1:]):
            running = [(s, k) for s, e, k in starts if s <= lo and e >= hi]
            if not running or any(k == "gemm" for s, k in running):
                continue
            exposed[min(running)[1]] += hi - lo
    # Stream order is dependency order (each kernel waits for the previous one to complete):
    # end(k) - end(k-1) is the time kernel k adds to the step ("critical" below).
    crit = collections.Counter()
    for t0, t1 in windows:
        inside = [(s, e, k, nm) for s, e, g, k, nm in ks if e > t0 and e <= t1]
        prev = t0
        for s, e, k, nm in inside:
            key = k if k != "gemm" else "gemm " + gemm_label(nm, g_of(ks, s, e))
            crit[key] += e - prev
            prev = e
    n = len(windows)
    us = lambda v: v / n / 1e3
    print(f"{n} decode steps from {a.csv}")
    print(f"step wall            {us(tot['wall']):9.1f} us")
    print(f"  some GEMM running  {us(tot['gemm busy']):9.1f} us")
    print(f"  only non-GEMM      {us(tot['busy'] - tot['gemm busy']):9.1f} us")
    print(f"  idle (no kernel)   {us(tot['wall'] - tot['busy']):9.1f} us")
    print()
    print(f"{'kernel kind':20s} {'per step':>8s} {'sum us':>9s} {'exposed us':>11s}   (exposed = runs while no GEMM does)")
    for k in sorted(summed, key=lambda k: -summed[k]):
        print(f"{k:20s} {counts[k] / n:8.1f} {us(summed[k]):9.1f} {us(exposed[k]):11.1f}")
    print()
    print(f"{'critical (end - previous end)':34s} {'us/step':>9s}")
    for k in sorted(crit, key=lambda k: -crit[k]):
        print(f"{k:34s} {us(crit[k]):9.1f}")
    if a.layer:
        t0, t1 = windows[-1]
        inside = [r for r in ks if r[0] >= t0 and r[1] <= t1]
        gi = [i for i, r in enumerate(inside) if r[3] == "gemm"]
        start = gi[8] if len(gi) > 8 else 0  # a layer in the middle of the step
        print()
        print(f"{'offset us':>9s} {'dur us':>7s} {'gap us':>7s} {'grid':>6s}  kernel")
        prev_end = inside[start][0]
        for s, e, g, k, nm in inside[start:start + 12]:
            print(f"{(s - inside[start][0]) / 1e3:9.2f} {(e - s) / 1e3:7.2f} {(s - prev_end) / 1e3:7.2f} {g:6d}  {nm[:90]}")
            prev_end = max(prev_end, e)


if __name__ == "__main__":
    main()
