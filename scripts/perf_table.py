#!/usr/bin/env python3
"""Markdown tables of the blocked-FP8 GEMM against its peers, from one results folder.

    python3 scripts/perf_table.py docs/results/h200              # full table (every row)
    python3 scripts/perf_table.py docs/results/h200 --readme     # the README's excerpt
    python3 scripts/perf_table.py BENCH.json ANCHORS.json|.log   # two files of a fresh run
                                                                 # (DeepGEMM: a deepgemm-dense.json
                                                                 # beside BENCH.json, if any)

A results folder (docs/results/<gpu>/) holds what one run on one board produced:

    meta.json            date, board, commit, the commands (printed above the table)
    bench.json           `bench --json` (examples/bench.rs): ours "into" and op, our cuBLASLt
                         provider, candle bf16, hot and cold, with `relerr` per FP8 provider
    anchors.json         `anchors.py --json` (peers): torch cuBLASLt blockwise (`_scaled_mm`),
                         tuned Triton, torch bf16 — each FP8 peer as [hot, cold, what, relerr]
    anchors.log          read instead when there is no anchors.json: the text log of
                         `anchors.py` (the same peers, the shapes it printed, no error figures)
    deepgemm-dense.json  optional: `deepgemm.py dense` in the same run, rows with `relerr`
    deepgemm-quoted.json optional: DeepGEMM figures quoted from another run ({"source", "rows"})

Method (docs/perf.md): µs, median of CUDA-graph replays; hot = one weight set, cold = rotating
weight copies beyond L2. "ours" is ours written into a preallocated output ("into"), the peers'
protocol. Target: ours ≤ 0.9 × the fastest FP8 peer below M = 512 and ≤ 0.95 × from 512, hot and
cold alike.

Error figures. A row counts as met only when
  * ours carries a relative error (`relerr.into`, formerly `relerr.hopper`, in bench.json) ≤ 3e-3 — a bench run with
    `--no-check` has none, and its rows are never met;
  * at least one FP8 peer it is compared with carries an error figure ≤ 3e-3. A peer figure
    above 3e-3 computes something else: it is dropped from the comparison (marked ✗). A peer
    figure with no error figure (DeepGEMM quoted from another run, marked †; every peer read
    from an anchors .log) is kept in the comparison, so it can turn a row into a miss but never
    into a met row.
Every error field found, its largest value and every refused row go to stderr.
"""
import json
import os
import re
import sys

MAX_RELERR = 3e-3
README_ROWS = [(m, 4096, 4096) for m in (1, 16, 64, 128, 256, 512, 2048, 8192)] + [
    (1, 10240, 5120), (16, 10240, 5120), (128, 10240, 5120),
    (1, 5120, 8192), (16, 5120, 8192),
    (1, 51200, 5120), (16, 51200, 5120), (128, 51200, 5120),
    (1, 5120, 25600), (16, 5120, 25600), (128, 5120, 25600),
    (2048, 10240, 5120), (2048, 5120, 25600)]


def warn(*a):
    print(*a, file=sys.stderr)


def load_anchors(path):
    """{(m, n, k): {"cublas": (hot, cold, relerr), "triton": ..., "bf16": (hot, cold, None)}}."""
    out = {}
    if path.endswith(".json"):
        for r in json.load(open(path))["rows"]:
            d = {}
            for p in ("cublas", "triton"):
                v = r.get(p)
                if isinstance(v, list) and len(v) >= 2:
                    err = v[3] if len(v) > 3 and isinstance(v[3], (int, float)) else None
                    d[p] = (v[0], v[1], err)
            if isinstance(r.get("bf16"), list):
                d["bf16"] = (r["bf16"][0], r["bf16"][1], None)
            out[(r["M"], r["N"], r["K"])] = d
        return out
    # The text log of older runs: no error figures.
    pat = r"\s*(\d+)\s+(\d+)\s+(\d+)\s+\|\s+([\d.]+)\s+([\d.]+)\s+\|\s+([\d.]+)\s+([\d.]+)\s+\|\s+([\d.]+)\s+([\d.]+)"
    for line in open(path):
        m = re.match(pat, line)
        if m:
            v = [float(x) for x in m.groups()[3:]]
            out[tuple(int(x) for x in m.groups()[:3])] = dict(
                bf16=(v[0], v[1], None), cublas=(v[2], v[3], None), triton=(v[4], v[5], None))
    warn(f"{path}: a text log carries no peer error figures; use anchors.json")
    return out


def load_deepgemm(folder):
    """({(m, n, k): (hot, cold, relerr)}, note) from deepgemm-dense.json or deepgemm-quoted.json."""
    same = os.path.join(folder, "deepgemm-dense.json")
    quoted = os.path.join(folder, "deepgemm-quoted.json")
    if os.path.exists(same):
        rows = json.load(open(same))
        return {(r["M"], r["N"], r["K"]): (r["hot"], r.get("cold"), r.get("relerr")) for r in rows}, \
            "DeepGEMM in the same run (`deepgemm.py dense`)"
    if os.path.exists(quoted):
        doc = json.load(open(quoted))
        return {(r["M"], r["N"], r["K"]): (r["hot"], r.get("cold"), r.get("relerr")) for r in doc["rows"]}, \
            f"DeepGEMM quoted from another run: {doc['source']}"
    return {}, None


def main(argv):
    readme = "--readme" in argv
    args = [a for a in argv if not a.startswith("--")]
    meta, dg, dg_note = {}, {}, None
    if len(args) == 1 and os.path.isdir(args[0]):
        folder = args[0]
        bench_path = os.path.join(folder, "bench.json")
        anchors_path = os.path.join(folder, "anchors.json")
        if not os.path.exists(anchors_path) and os.path.exists(os.path.join(folder, "anchors.log")):
            anchors_path = os.path.join(folder, "anchors.log")
        if not os.path.exists(bench_path):
            sys.exit(f"{folder}: no bench.json (nothing measured on this board is kept here)")
        if os.path.exists(os.path.join(folder, "meta.json")):
            meta = json.load(open(os.path.join(folder, "meta.json")))
        dg, dg_note = load_deepgemm(folder)
    elif len(args) == 2:
        bench_path, anchors_path = args
        dg, dg_note = load_deepgemm(os.path.dirname(os.path.abspath(bench_path)))
    elif len(args) == 1:
        sys.exit(f"{args[0]}: not a results folder (docs/results/<gpu>/)")
    else:
        sys.exit(__doc__)
    bench = json.load(open(bench_path))
    anchors = load_anchors(anchors_path) if os.path.exists(anchors_path) else {}

    rows = {}
    for r in bench["rows"]:
        if "temp" in r:  # skip --sweep / --attention rows
            rows.setdefault((r["label"], r["m"], r["n"], r["k"]), {})[r["temp"]] = r

    # The error fields present, and their largest values (stderr).
    fields = {}
    for t in rows.values():
        for r in t.values():
            for p, e in (r.get("relerr") or {}).items():
                fields.setdefault(f"bench relerr.{p}", []).append(e)
    for d in anchors.values():
        for p in ("cublas", "triton"):
            if p in d:
                fields.setdefault(f"anchors {p}[3]", []).append(d[p][2])
    for v in dg.values():
        fields.setdefault("deepgemm relerr", []).append(v[2])
    for name, vals in sorted(fields.items()):
        have = [v for v in vals if isinstance(v, (int, float))]
        warn(f"error field {name}: {len(have)} of {len(vals)} figures present"
             + (f", largest {max(have):.3e}" if have else ""))
    if dg and not any(isinstance(v[2], (int, float)) for v in dg.values()):
        warn("deepgemm: no error figure (quoted figures): counted against ours, never for")

    tally = [0, 0]
    full, short, refused = [], {}, []

    def peer(v):
        """A peer figure (hot, cold, err) usable in the comparison: None when its error fails."""
        if v is None:
            return None
        err = v[2]
        if isinstance(err, (int, float)) and not err <= MAX_RELERR:
            return None
        return v

    def f(x):
        return "–" if x is None else f"{x:.2f}"

    def pair(v, mark=""):
        if v is None:
            return "–"
        bad = isinstance(v[2], (int, float)) and not v[2] <= MAX_RELERR
        return f"{f(v[0])} / {f(v[1])}" + (" ✗" if bad else mark)

    for (label, m, n, k), t in rows.items():
        h, c = t.get("hot"), t.get("cold")
        if h is None or c is None:
            continue
        a = anchors.get((m, n, k), {})
        d = dg.get((m, n, k))
        # The "into" column is the one in the table (older bench files name it "hopper").
        errs = [(r.get("relerr") or {}).get("into", (r.get("relerr") or {}).get("hopper")) for r in (h, c)]
        ours_ok = all(isinstance(e, (int, float)) and e <= MAX_RELERR for e in errs)
        lt = None  # our cuBLASLt provider, in the bench's own run
        if h.get("cublaslt_us") is not None:
            lt = (h["cublaslt_us"], c.get("cublaslt_us"), (h.get("relerr") or {}).get("cublaslt"))
        peers = [p for p in (peer(lt), peer(a.get("cublas")), peer(a.get("triton")), peer(d)) if p]
        ih = h.get("ours_into_us") or h["ours_us"]
        ic = c.get("ours_into_us") or c["ours_us"]
        if peers:
            bh = min(p[0] for p in peers)
            bc = min((p[1] for p in peers if p[1] is not None), default=None)
            rh, rc = ih / bh, (ic / bc if bc else float("inf"))
            ok = max(rh, rc) <= (0.9 if m < 512 else 0.95)
        else:
            bh = bc = rh = rc = None
            ok = False
        if not ours_ok:
            refused.append(f"{m}×{n}×{k}: ours has no passing error figure (relerr {errs})")
            ok = False
        if peers and not any(isinstance(p[2], (int, float)) for p in peers):
            refused.append(f"{m}×{n}×{k}: no peer with an error figure")
            ok = False
        verdict = "yes" if ok else ("**no**" if ours_ok and peers else "not counted")
        tally[0 if ok else 1] += 1
        ratio = f"{rh:.2f} / {rc:.2f}" if rh is not None else "–"
        quoted = " †" if d is not None and d[2] is None else ""
        known = [e for e in errs if e is not None]
        full.append(
            f"| {label} {n}×{k} | {m} | {f(ih)} / {f(ic)} | {f(h['ours_us'])} / {f(c['ours_us'])} | "
            f"{f(h.get('full_linear_us'))} | {pair(lt)} | {pair(a.get('cublas'))} | {pair(a.get('triton'))} | "
            f"{pair(d, quoted)} | {f(h.get('bf16_us'))} | {f(bh)} / {f(bc)} | {ratio} | "
            f"{f'{max(known):.2e}' if known else '–'} | {verdict} |")
        # README: cuBLASLt = the faster of our provider and torch's, hot and cold separately.
        lts = [p for p in (peer(lt), peer(a.get("cublas"))) if p]
        lt_best = (min(p[0] for p in lts), min(p[1] for p in lts), 0.0) if lts else None
        ours = f"{f(ih)} / {f(ic)}"
        name = f"{m}×{n}×{k}" + ("" if label == "square" else f" ({label})")
        short[(m, n, k)] = (f"| {name} | {f'**{ours}**' if ok else ours} | {pair(lt_best)} | "
                            f"{pair(a.get('triton'))} | {pair(d, quoted)} | {f(h.get('bf16_us'))} | {ratio} |")

    for line in refused:
        warn("not counted:", line)

    if meta:
        print(f"{meta['board']}, {meta['date']}, {meta['code']}.")
        print("Commands: " + "; then ".join(f"`{c}`" for c in meta["commands"]) + ".")
        print()
    if readme:
        print("| M×N×K | ours | cuBLASLt | Triton | DeepGEMM | candle bf16 | ours ÷ best peer |")
        print("|---|---|---|---|---|---|---|")
        print("\n".join(short[r] for r in README_ROWS if r in short))
    else:
        print("| shape | M | ours into (hot / cold) | ours op (hot / cold) | full linear (hot) | "
              "cuBLASLt, our provider | cuBLASLt, torch | Triton | DeepGEMM | candle bf16 (hot) | "
              "fastest FP8 peer | ours ÷ fastest | ours relerr | target met |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        print("\n".join(full))
        print(f"\nRows meeting the target: {tally[0]} of {sum(tally)}.")
    if dg_note and any(v[2] is None for v in dg.values()):
        print(f"\n† {dg_note}; no error figure, so it can only count against ours.")
    elif dg_note:
        print(f"\n{dg_note}.")
    else:
        peers_named = "cuBLASLt and Triton" if anchors else "our cuBLASLt provider only (no anchors.py in this run)"
        print(f"\nNo DeepGEMM figures in this run: the peers are {peers_named}.")
    if anchors and not anchors_path.endswith(".json"):
        print("cuBLASLt (torch), Triton: from the text log of `anchors.py` (no error figures), so they "
              "can only count against ours.")
    if any("✗" in line for line in full + list(short.values())):
        print("✗ a peer figure whose relative error is above 3e-3 (dropped from the comparison).")


if __name__ == "__main__":
    main(sys.argv[1:])
