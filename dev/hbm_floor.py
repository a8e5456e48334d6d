#!/usr/bin/env python3
"""The practical HBM floor of a decode-size GEMM: a plain read of the weight bytes
(dev/hbm_read.cu), timed like the harness sweep (triton's do_bench_cudagraph, median):
hot = one buffer again and again, cold = a sequence over copies that together exceed the L2.
Prints µs, TB/s and the ratio to the issue's floor (bytes / 4.25 TB/s) per size and grid.

    python3 dev/hbm_floor.py [--ctas 1 2 4]

Builds /tmp/hbm_read.so with nvcc (sm_90a) on first use."""
import argparse
import ctypes
import os
import subprocess

import torch
from triton.testing import do_bench_cudagraph

HERE = os.path.dirname(os.path.abspath(__file__))
# Qwen3-32B decode weights (FP8 bytes): q|k|v, o, gate|up, down, and 4096^2.
SHAPES = {"qkv 10240x5120": 10240 * 5120, "o 5120x8192": 5120 * 8192, "gate_up 51200x5120": 51200 * 5120,
          "down 5120x25600": 5120 * 25600, "4096x4096": 4096 * 4096}


def build(so="/tmp/hbm_read.so"):
    if not os.path.exists(so):
        subprocess.run(["nvcc", "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-Xcompiler", "-fPIC", "-shared",
                        os.path.join(HERE, "hbm_read.cu"), "-o", so], check=True)
    lib = ctypes.CDLL(so)
    vp, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
    lib.hbm_read.argtypes = [vp, i64, vp, i32, i32, vp]
    lib.hbm_read.restype = i32
    return lib


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctas", type=int, nargs="*", default=[1, 2, 4], help="CTAs of 512 threads per SM")
    args = ap.parse_args()
    lib = build()
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    sink = torch.zeros(1, dtype=torch.int32, device=dev)
    print(f"{torch.cuda.get_device_name(0)}, {sms} SMs")
    print("HBM shape bytes_MB ctas/SM hot_us cold_us cold_TB/s cold/floor(4.25)")
    for name, nbytes in SHAPES.items():
        copies = max(2, -(-200_000_000 // nbytes))  # >= 200 MB in all: several times the L2
        bufs = [torch.full((nbytes,), 7, dtype=torch.uint8, device=dev) for _ in range(copies)]
        for cps in args.ctas:
            def one(b):
                # The stream at call time: the graph capture runs on a side stream.
                return lambda: lib.hbm_read(b.data_ptr(), nbytes, sink.data_ptr(), sms, cps,
                                            torch.cuda.current_stream().cuda_stream)
            fns = [one(b) for b in bufs]
            assert fns[0]() == 0
            torch.cuda.synchronize()
            hot = do_bench_cudagraph(fns[0], rep=20, return_mode="median") * 1e3

            def seq():
                for f in fns:
                    f()
            cold = do_bench_cudagraph(seq, rep=20, return_mode="median") * 1e3 / len(fns)
            floor = nbytes / 4.25e12 * 1e6
            print(f"HBM {name:20s} {nbytes / 1e6:7.1f} {cps} {hot:7.2f} {cold:7.2f} {nbytes / cold / 1e6:5.2f} "
                  f"{cold / floor:5.3f}", flush=True)
        del bufs
        torch.cuda.empty_cache()
    assert int(sink.item()) == 0


if __name__ == "__main__":
    main()
