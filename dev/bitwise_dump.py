#!/usr/bin/env python3
"""Outputs of one kernel library on fixed inputs, for a bitwise comparison of two builds (one
process per library: two copies of the library in one process share its name).

    python3 dev/bitwise_dump.py LIB OUT.pt CFG[,CFG...] M,N,K [M,N,K ...]
    python3 dev/bitwise_dump.py --compare A.pt B.pt

Inputs come from harness.make_inputs (seeded by the shape), so both runs see the same bytes."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

import harness as h  # noqa: E402


def dump(lib_path, out, cfgs, shapes):
    lib = h.Lib(lib_path)
    res = {}
    for spec in shapes:
        M, N, K = (int(v) for v in spec.split(","))
        x, w, sw = h.make_inputs(M, N, K, seed=M + N)
        q, sa = lib.quant(x)
        for name in cfgs.split(","):
            c = h.cfg_parse(name)
            y = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
            st = lib.gemm(q, sa, w, sw, y, c)
            torch.cuda.synchronize()
            res[f"{M}x{N}x{K} {name}"] = y.cpu() if st == 0 else f"status {lib.L.fp8gemm_status_string(st).decode()}"
    torch.save(res, out)


def compare(a, b):
    ra, rb = torch.load(a), torch.load(b)
    bad = 0
    for k in ra:
        x, y = ra[k], rb.get(k)
        same = isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and torch.equal(x.view(torch.int16), y.view(torch.int16))
        bad += not same
        print(f"BITWISE {k}: {'equal' if same else 'DIFFER ' + (x if isinstance(x, str) else '') + (y if isinstance(y, str) else '')}")
    print(f"BITWISE {len(ra)} pairs, {bad} differ")
    return bad


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        sys.exit(1 if compare(sys.argv[2], sys.argv[3]) else 0)
    dump(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
