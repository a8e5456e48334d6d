#!/usr/bin/env python3
"""Per-CTA kernel timeline of decode steps, from `decode --trace-out FILE` (a build with
the cargo feature `trace`; kernels/include/fp8gemm/common/trace.cuh, kernels/trace/trace.cu).

    python3 dev/trace_timeline.py FILE [--steps N] [--csv OUT]
    python3 dev/trace_timeline.py FILE --chain N

`--chain N` (any launch sequence, e.g. `bench --columns into --trace-out FILE` on one shape):
the same per-kernel medians over the last N launches, grouped by kernel kind, and the last
launches one by one.

Splits the records into launches (entries of consecutive launches never interleave under PDL: a
dependent grid starts only after every CTA of the one before has triggered), the launches into
decode steps (one argmax per step) and each step's launches into layers (the b1 / b16 chains:
norm, q|k|v GEMM, attention, o GEMM, norm, gate/up GEMM, [SiLU], down GEMM). Prints, per kernel
of a layer, medians over the layers of the last N complete steps (µs):

  crit      last CTA end - the previous launch's last CTA end (the step's critical path)
  wait      first CTA past griddepcontrol.wait - the previous launch's last end (boundary)
  then per kind: GEMM  act (first K block landed - the previous launch's last end, median over
                       the CTAs that entered before it), loop (last K block done - first
                       landed), epi (end - last K block), tail (last end - 90th
                       percentile end), late (CTAs entering after the first CTA ended)
                 norm  stage (past the wait -> row staged), bar (-> scale known: the split
                       norm's CTA barrier), out (-> end: normalize, quantize, store)
                 other body (past the wait -> end)
"""
import argparse
import statistics
import struct
import sys

TAGS = {1: "gemm", 2: "norm8", 3: "norm", 4: "swiglu", 5: "attn", 6: "combine", 7: "argmax", 8: "quant", 9: "reduce"}
UNITS = ["swap_ab", "small_m", "warp_spec", "persistent", "fused_quant", "attention", "sampling", "quant", "gemm", "swiglu", "grouped"]
REC = struct.Struct("<Q4IHHI")


def load(path):
    recs = []
    with open(path, "rb") as f:
        data = f.read()
    off = 0
    while off < len(data):
        magic, unit, count, cap = struct.unpack_from("<4I", data, off)
        if magic != 0x54385046:
            sys.exit(f"{path}: bad header at byte {off}")
        off += 16
        n = min(count, cap)
        for i in range(n):
            t0, d1, d2, d3, d4, tag, sm, cta = REC.unpack_from(data, off + 32 * i)
            if t0:
                recs.append((t0, unit, tag, (d1, d2, d3, d4), sm, cta))
        off += 32 * n
        if count > cap:
            print(f"note: unit {UNITS[unit]} wrapped ({count} records, ring {cap}): oldest lost", file=sys.stderr)
    recs.sort()
    return recs


class Launch:
    def __init__(self, unit, tag):
        self.unit, self.tag, self.ctas = unit, tag, []
        self.seen = set()

    def name(self):
        return TAGS.get(self.tag, str(self.tag))

    def marks(self, i):
        """Absolute times of mark i (1..4; 4 = end) of the CTAs that reached it."""
        return sorted(t0 + d[i - 1] for t0, d, _, _ in self.ctas if d[i - 1])

    def phase(self, a, b):
        """Median over CTAs of mark b - mark a (0 = entry)."""
        v = [(d[b - 1] if b else 0) - (d[a - 1] if a else 0) for _, d, _, _ in self.ctas
             if (not a or d[a - 1]) and d[b - 1]]
        return statistics.median(v) / 1e3 if v else float("nan")

    @property
    def first_entry(self):
        return self.ctas[0][0]

    @property
    def last_end(self):
        e = self.marks(4)
        return e[-1] if e else self.ctas[-1][0]


def launches(recs):
    out = []
    for t0, unit, tag, d, sm, cta in recs:
        cur = out[-1] if out else None
        if cur is None or (cur.unit, cur.tag) != (unit, tag) or cta in cur.seen:
            cur = Launch(unit, tag)
            out.append(cur)
        cur.ctas.append((t0, d, sm, cta))
        cur.seen.add(cta)
    return out


def steps(ls):
    """Lists of launches between consecutive argmax launches (the step's last kernel)."""
    idx = [i for i, l in enumerate(ls) if l.tag == 7]
    return [ls[a + 1 : b + 1] for a, b in zip(idx, idx[1:])]


def layer_names(step):
    """Names the launches of one step: the GEMM after a norm/attention/swiglu/norm is q|k|v/o/
    gate_up/down; at 9-16 tokens gate_up runs SiLU in its epilogue (no swiglu launch)."""
    names, prev = [], None
    in_mlp = False
    for l in step:
        n = l.name()
        if n == "gemm":
            if prev in ("norm8", "norm"):
                n = "gate_up" if in_mlp else "qkv"
            elif prev == "attn" or prev == "combine":
                n = "o"
            elif prev == "swiglu" or prev == "gate_up":
                n = "down"
            else:
                n = "gemm?"
        elif n in ("norm8", "norm"):
            # input norm (after down / at the step start) or post-attention norm (after o)
            in_mlp = prev == "o"
            n = n + (".post" if in_mlp else ".in")
        names.append(n)
        prev = n.split(".")[0] if n.startswith("norm") else n
    return names


def metrics(l, prev):
    """The table's cells for launch `l` after launch `prev` (µs; see the module doc)."""
    crit = (l.last_end - prev.last_end) / 1e3
    m1 = l.marks(1)
    wait = (m1[0] - prev.last_end) / 1e3 if m1 else float("nan")
    ends = l.marks(4)
    r = {"n": len(l.ctas), "crit": crit, "wait": wait, "lead": (prev.last_end - l.first_entry) / 1e3}
    if l.tag == 1:
        p90 = ends[int(0.9 * (len(ends) - 1))] if ends else 0
        first_end = ends[0] if ends else 0
        early = [t0 + d[1] - prev.last_end for t0, d, _, _ in l.ctas if t0 < prev.last_end and d[1]]
        r.update(act=statistics.median(early) / 1e3 if early else float("nan"),
                 loop=l.phase(2, 3), epi=l.phase(3, 4),
                 tail=(ends[-1] - p90) / 1e3 if ends else float("nan"),
                 late=sum(1 for t0, _, _, _ in l.ctas if t0 > first_end))
    elif l.tag in (2, 3):
        r.update(stage=l.phase(1, 2), bar=l.phase(2, 3), out=l.phase(3, 4))
    else:
        # From the PDL wait (mark 1), or from entry for a kernel that does not wait (quantizer).
        r.update(body=l.phase(1 if l.marks(1) else 0, 4))
    return r


KEYS = ["n", "crit", "wait", "lead", "act", "loop", "epi", "tail", "late", "stage", "bar", "out", "body"]


def print_medians(rows, order, per, unit):
    """One line per kernel name: medians of each key over its rows (crit summed, / `per`)."""
    print("kernel        " + " ".join(f"{k:>7}" for k in KEYS) + "  count")
    tot = 0.0
    for n in order:
        rs = rows[n]
        cells = []
        for k in KEYS:
            v = [r[k] for r in rs if k in r and r[k] == r[k]]
            cells.append(f"{statistics.median(v):7.2f}" if v else f"{'':>7}")
        crit_sum = sum(r["crit"] for r in rs) / per
        tot += crit_sum
        print(f"{n:13} " + " ".join(cells) + f"  {len(rs):5}  (crit/{unit} {crit_sum:8.1f})")
    return tot


def chain(ls, n, ctas_csv=None):
    """--chain: medians per kernel kind over the last n launches, then the last few one by one;
    every CTA of those n launches to `ctas_csv` if given."""
    ls = ls[-(n + 1) :]
    rows, order = {}, []
    for prev, l in zip(ls, ls[1:]):
        name = f"{l.name()}.{UNITS[l.unit]}" if l.tag == 1 else l.name()
        if name not in rows:
            rows[name] = []
            order.append(name)
        rows[name].append(metrics(l, prev))
    print(f"{len(ls) - 1} launches; median per kernel kind (us; lead = first entry before the previous launch's last end)")
    tot = print_medians(rows, order, 1, "all")
    span = (ls[-1].last_end - ls[0].last_end) / 1e3
    print(f"last end - first launch's end over {len(ls) - 1} launches: {span:.1f} us ({span / max(1, len(ls) - 1):.2f} per launch; crit sum {tot:.1f})")
    print()
    print("last launches (us from the first shown launch's first entry): name ctas first_entry first_past_wait last_end"
          " | SMs used, most CTAs on one SM, CTAs entered before the previous launch's last end")
    base = ls[-8].first_entry if len(ls) >= 8 else ls[0].first_entry
    shown8 = ls[-8:]
    for i, l in enumerate(shown8):
        m1 = l.marks(1)
        past = f"{(m1[0] - base) / 1e3:8.2f}" if m1 else f"{'-':>8}"
        per_sm = {}
        for _, _, sm, _ in l.ctas:
            per_sm[sm] = per_sm.get(sm, 0) + 1
        prev = shown8[i - 1] if i else (ls[-9] if len(ls) >= 9 else None)
        early = sum(1 for t0, _, _, _ in l.ctas if prev is not None and t0 < prev.last_end)
        print(f"  {l.name():7} {len(l.ctas):5} {(l.first_entry - base) / 1e3:8.2f} {past} {(l.last_end - base) / 1e3:8.2f}"
              f" | {len(per_sm):4} {max(per_sm.values()):3} {early:5}")
    if ctas_csv:
        shown = ls[-n:]
        with open(ctas_csv, "w") as f:
            f.write("launch,kernel,unit,cta,sm,entry_ns,m1_ns,m2_ns,m3_ns,end_ns\n")
            for i, l in enumerate(shown):
                for t0, d, sm, cta in l.ctas:
                    f.write(f"{i},{l.name()},{UNITS[l.unit]},{cta},{sm},{t0 - shown[0].first_entry},{d[0]},{d[1]},{d[2]},{d[3]}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--steps", type=int, default=3, help="last N complete steps (default 3)")
    ap.add_argument("--csv", help="also write every launch of those steps to this CSV")
    ap.add_argument("--chain", type=int, help="no decode steps: medians over the last N launches")
    ap.add_argument("--ctas", help="with --chain: write every CTA of those launches to this CSV")
    a = ap.parse_args()
    recs = load(a.file)
    ls = launches(recs)
    if a.chain:
        if len(ls) < 2:
            sys.exit("fewer than two launches in the trace")
        chain(ls, a.chain, a.ctas)
        return
    st = steps(ls)
    if not st:
        sys.exit("no complete step (two argmax launches) in the trace")
    st = st[-a.steps :]
    print(f"{len(recs)} records, {len(ls)} launches, {len(st)} steps analysed")
    rows = {}
    order = []
    csv = []
    for si, step in enumerate(st):
        names = layer_names(step)
        t_step = step[-1].last_end - step[0].first_entry
        print(f"step {si}: {len(step)} launches, first entry -> argmax end {t_step / 1e3:.1f} us")
        prev = None
        for l, n in zip(step, names):
            if prev is not None:
                r = metrics(l, prev)
                crit, wait = r["crit"], r["wait"]
                if n not in rows:
                    rows[n] = []
                    order.append(n)
                rows[n].append(r)
                csv.append((si, n, len(l.ctas), l.first_entry, l.last_end, crit, wait))
            prev = l
    print()
    print("median over layers and steps (us); lead = how long before the previous launch's end the first CTA entered")
    tot = print_medians(rows, order, len(st), "step")
    print(f"sum of crit per step: {tot:.1f} us")
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("step,kernel,ctas,first_entry_ns,last_end_ns,crit_us,wait_us\n")
            for row in csv:
                f.write(",".join(str(x) for x in row) + "\n")


if __name__ == "__main__":
    main()
