#!/usr/bin/env python3
"""The MLP segment of each decode layer, from kernel timelines (dev/ktrace.c CSVs).

    python3 dev/ktrace_mlp.py trace.csv [trace.csv ...] [--steps N]

For the last N complete steps (delimited by the greedy argmax kernel), every layer's gate/up
GEMM (grid 800 or 400 at batch 1, 200 for the gated 256-row tile; 'gated' when it is the SwiGLU-epilogue kernel) is found after
its post-attention norm. Printed per trace, mean / std in microseconds over all layers:
  norm -> gate_up done   end of the norm to the end of the gate/up GEMM, or of the SwiGLU
                         kernel after it when there is one (the work the epilogue replaces)
  gate_up done -> down   from there to the end of the down GEMM
  norm -> down           the whole MLP after its norm
Compares the gated gate/up GEMM (SwiGLU epilogue) with the GEMM + fp8gemm_swiglu_quant path.
"""
import argparse
import csv
import statistics as st


def load(path):
    rows = []
    for r in csv.reader(open(path)):  # start, end, stream, grid x, grid y, grid z, block, smem, name
        rows.append((int(r[0]), int(r[1]), int(r[3]), r[-1]))
    rows.sort()
    return rows


def segments(path, steps):
    ks = load(path)
    marks = [i for i, k in enumerate(ks) if "argmax" in k[3]][-(steps + 1):]
    out = {"norm -> gate_up done": [], "gate_up done -> down": [], "norm -> down": []}
    for a, b in zip(marks[:-1], marks[1:]):
        step = ks[a + 1:b + 1]
        for i, (_, end, grid, name) in enumerate(step):
            if "sm90_fp8_gemm" not in name or grid not in (800, 400, 200):
                continue
            j = i - 1
            while "add_rmsnorm" not in step[j][3]:
                j -= 1
            norm_end, done, nxt = step[j][1], end, i + 1
            if "swiglu" in step[nxt][3]:
                done, nxt = step[nxt][1], nxt + 1
            out["norm -> gate_up done"].append((done - norm_end) / 1e3)
            out["gate_up done -> down"].append((step[nxt][1] - done) / 1e3)
            out["norm -> down"].append((step[nxt][1] - norm_end) / 1e3)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--steps", type=int, default=11)
    a = ap.parse_args()
    print(f"{'trace':40} {'layers':>6} {'norm -> gate_up done':>24} {'gate_up done -> down':>24} {'norm -> down':>24}")
    for p in a.traces:
        seg = segments(p, a.steps)
        n = len(seg["norm -> down"])
        cells = " ".join(f"{st.mean(v):>15.2f} ± {st.pstdev(v):5.2f}" if v else f"{'-':>24}" for v in seg.values())
        print(f"{p.split('/')[-1]:40} {n:>6} {cells}")


if __name__ == "__main__":
    main()
