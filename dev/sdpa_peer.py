#!/usr/bin/env python3
"""The prefill-attention peer: torch's scaled_dot_product_attention (its flash backend on the GPU)
at the shapes `bench --prefill-attention` times, Qwen3-32B's layer (64 query / 8 kv heads of
128, batch 1, bf16, causal), one whole prompt per call. Timed with CUDA events over a CUDA graph
of `reps` calls (median of `samples`), FLOPs counted as the bench counts them: 4 * heads * d per
(query, visible key) pair, T (T + 1) / 2 pairs.

    python3 dev/sdpa_peer.py 512 2048 8192 32768 [--json out.json]
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F


def time_ms(fn, reps, samples):
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        fn()
        with torch.cuda.graph(g, stream=s):
            for _ in range(reps):
                fn()
    torch.cuda.synchronize()
    g.replay()
    times = []
    for _ in range(samples):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) / reps)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lens", type=int, nargs="+")
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    hq, hkv, d = 64, 8, 128
    rows = []
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    for t in a.lens:
        q = (torch.randn(1, hq, t, d, device="cuda") * 0.2).bfloat16()
        k = torch.randn(1, hkv, t, d, device="cuda").bfloat16()
        v = torch.randn(1, hkv, t, d, device="cuda").bfloat16()
        reps = max(1, min(20, (1 << 31) // (t * t * hq)))
        for backend in ("flash", "cudnn"):
            kinds = {"flash": torch.nn.attention.SDPBackend.FLASH_ATTENTION,
                     "cudnn": torch.nn.attention.SDPBackend.CUDNN_ATTENTION}
            try:
                # GQA: the flash backend takes equal head counts; repeat K/V outside the timing.
                kr, vr = k.repeat_interleave(hq // hkv, 1), v.repeat_interleave(hq // hkv, 1)
                with torch.nn.attention.sdpa_kernel(kinds[backend]):
                    ms = time_ms(lambda: F.scaled_dot_product_attention(q, kr, vr, is_causal=True, scale=1.0),
                                 reps, a.samples)
            except Exception as e:  # a backend this torch build lacks
                print(f"SDPA {backend} len {t}: unavailable ({str(e).splitlines()[0][:100]})")
                continue
            tflops = 4 * hq * d * (t * (t + 1) / 2) / (ms * 1e-3) / 1e12
            print(f"SDPA {backend} len {t} {ms:.3f} ms {tflops:.0f} TFLOP/s")
            rows.append({"backend": backend, "len": t, "ms": ms, "tflops": tflops})
            del kr, vr
        del q, k, v
        torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
