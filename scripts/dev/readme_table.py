#!/usr/bin/env python3
"""README's performance excerpt from a full table of scripts/perf_table.py (final-table.md):

    python3 scripts/dev/readme_table.py docs/perf/<session>/callN/final-table.md

The rows below, as "M×N×K (label)"; cuBLASLt = the faster of our provider and torch's, hot and
cold separately; bold where the row meets the issue's target."""
import sys

ROWS = [(m, "square 4096×4096") for m in (1, 16, 32, 64, 128, 224, 256, 512, 2048, 4096)] + [
    (1, "qkv 10240×5120"), (1, "o 5120×8192"), (1, "gate_up 51200×5120"), (1, "down 5120×25600"),
    (16, "qkv 10240×5120"), (32, "qkv 10240×5120"), (16, "gate_up 51200×5120"), (32, "gate_up 51200×5120"),
    (128, "gate_up 51200×5120"), (16, "down 5120×25600"), (128, "o 5120×8192"),
    (2048, "qkv 10240×5120"), (2048, "o 5120×8192"), (2048, "down 5120×25600")]

table = {}
for line in open(sys.argv[1]):
    c = [x.strip() for x in line.strip().strip("|").split("|")]
    if len(c) == 13 and c[1].isdigit():
        table[(int(c[1]), c[0])] = c


def pair(s):
    return [None if v.strip() in ("–", "") else float(v) for v in s.split("/")] if "/" in s else [None, None]


def fmt(v):
    return "–" if v is None else f"{v:.2f}"


print("| M×N×K | ours | cuBLASLt | Triton | DeepGEMM | candle bf16 | ours ÷ best |")
print("|---|---|---|---|---|---|---|")
for (m, label) in ROWS:
    c = table[(m, label)]
    kind, nk = label.split(" ")
    name = f"{m}×{nk}" + ("" if kind == "square" else f" ({kind})")
    lt = [min(x for x in (a, b) if x is not None) for a, b in zip(pair(c[5]), pair(c[6]))]
    ours = f"**{c[2]}**" if c[12] == "yes" else c[2]
    print(f"| {name} | {ours} | {fmt(lt[0])} / {fmt(lt[1])} | {c[7]} | {c[8]} | {c[9]} | {c[11]} |")
