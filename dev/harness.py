#!/usr/bin/env python3
"""Dev harness for the candle-fp8 GEMM kernels over the C ABI (kernels/api.h): ctypes + torch on
a Hopper GPU, no cargo. Build the library first: `bash dev/build_lib.sh` (-> libfp8gemm.so).

  python3 dev/harness.py --lib ./libfp8gemm.so check        # correctness sweep (every compiled config)
  python3 dev/harness.py --lib ./libfp8gemm.so sanitize     # few small shapes per schedule (run under compute-sanitizer)
  python3 dev/harness.py --lib ./libfp8gemm.so bench        # timing table vs cuBLASLt (hot/cold; needs anchors.py beside this file)
  python3 dev/harness.py --lib ./libfp8gemm.so sweep --shapes M,N,K ... [--only CFG,...]  # hot/cold time of every config
  python3 dev/harness.py --lib ./libfp8gemm.so probe --shapes M,N,K ... --only CFG,...    # per-CTA timeline (build:
      EXTRA_FLAGS=-DFP8GEMM_TRACE bash dev/build_lib.sh)
  python3 dev/harness.py --lib ./libfp8gemm.so stages --shapes M,N,K ... --only CFG,...   # per-stage probe (build:
      EXTRA_FLAGS=-DFP8GEMM_TRACE_STAGES bash dev/build_lib.sh)
  python3 dev/harness.py --lib ./libfp8gemm.so power --shapes M,N,K ... --only CFG,...[,torch_lt] [--data randn|codes|zeros]
      # steady-state us, SM clock, board power and energy per GEMM (large M runs at the power cap)

Configs are always explicit (the C side has no dispatch rule: src/dispatch.rs has it), named as
printed: KIND{block_m}x{block_n}s{stages}[k{split}], e.g. swap_ab8x64s8k2, persistent128x128s5.
The compiled set is read from the library (fp8gemm_compiled_configs).

Checks: quant kernel bit-exact vs torch (same formula), GEMM vs f32 dequantized reference
(relerr <= 3e-3, calc_diff < 1e-3, no NaN left in a NaN-poisoned output).
"""
import argparse
import ctypes
import itertools
import math
import os
import random
import re
import statistics
import sys
import time

import torch

FP8 = torch.float8_e4m3fn
dev = "cuda"
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

KIND = {"small_m": 1, "swap_ab": 2, "warp_spec": 3, "persistent": 4, "swap_ab_sk": 5}
KNAME = {v: k for k, v in KIND.items()}

# Compiled configs: (kind, block_m, block_n, stages, split_capable), read from the library
# (Lib.__init__). Persistent: split_k = the K ranges of each tile of a partial last round (split
# tail); swap_ab_sk (stream-K): split_k = CTAs per SM.
CONFIGS = []


class Cfg(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int32) for n in ("kind", "block_m", "block_n", "stages", "split_k", "num_sms")]


def cfg_of(kind, bm=0, bn=0, st=0, split=1, sms=0):
    return Cfg(KIND[kind], bm, bn, st, split, sms)


def cfg_parse(name):
    """The inverse of cfg_str: "warp_spec128x128s6k2" -> Cfg."""
    m = re.fullmatch(r"([a-z_]+?)(\d+)x(\d+)s(\d+)(?:k(\d+))?", name)
    assert m, f"bad config name {name}"
    return cfg_of(m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5) or 1))


def cfg_str(c):
    s = f"{KNAME[c.kind]}{c.block_m}x{c.block_n}s{c.stages}"
    return s + (f"k{c.split_k}" if c.split_k > 1 else "") + (f"@{c.num_sms}sms" if c.num_sms else "")


class Lib:
    def __init__(self, path):
        L = ctypes.CDLL(path)
        vp, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
        L.fp8gemm_gemm.argtypes = [vp, vp, vp, vp, vp, i64, i64, i64, ctypes.POINTER(Cfg), vp, ctypes.c_size_t, vp]
        L.fp8gemm_gemm.restype = i32
        L.fp8gemm_quantize_act.argtypes = [vp, i32, vp, vp, i64, i64, vp]
        L.fp8gemm_quantize_act.restype = i32
        L.fp8gemm_dequant_weight.argtypes = [vp, vp, vp, i64, i64, vp]
        L.fp8gemm_dequant_weight.restype = i32
        L.fp8gemm_workspace_bytes.argtypes = [ctypes.POINTER(Cfg), i64, i64, i64]
        L.fp8gemm_workspace_bytes.restype = ctypes.c_size_t
        L.fp8gemm_compiled_configs.argtypes = [ctypes.POINTER(Cfg), i32]
        L.fp8gemm_compiled_configs.restype = i32
        L.fp8gemm_status_string.argtypes = [i32]
        L.fp8gemm_status_string.restype = ctypes.c_char_p
        self.L = L
        n = L.fp8gemm_compiled_configs(None, 0)
        got = (Cfg * n)()
        L.fp8gemm_compiled_configs(got, n)
        CONFIGS[:] = [(KNAME[c.kind], c.block_m, c.block_n, c.stages, c.split_k == 0) for c in got]
        self.ws = torch.empty(1 << 20, dtype=torch.uint8, device=dev)
        # The persistent split tail's workspace: zeroed, apart from the others (flags page).
        self.ws_tail = torch.zeros(1 << 20, dtype=torch.uint8, device=dev)

    def stream(self):
        return ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

    def quant(self, x):
        M, K = x.shape
        mp = (M + 3) // 4 * 4
        q = torch.empty(M, K, dtype=FP8, device=dev)
        sa = torch.full((K // 128, mp), float("nan"), device=dev)
        dt = 0 if x.dtype == torch.bfloat16 else 1
        st = self.L.fp8gemm_quantize_act(x.data_ptr(), dt, q.data_ptr(), sa.data_ptr(), M, K, self.stream())
        assert st == 0, self.L.fp8gemm_status_string(st)
        return q, sa

    def ws_for(self, cfg, M, N, K):
        """The workspace buffer for a launch of cfg (grown as needed)."""
        need = self.L.fp8gemm_workspace_bytes(ctypes.byref(cfg), M, N, K)
        kind = cfg.kind
        if kind in (KIND["persistent"], KIND["swap_ab_sk"]):  # flags page: zeroed, kept apart
            if need > self.ws_tail.numel():
                self.ws_tail = torch.zeros(need + (1 << 20), dtype=torch.uint8, device=dev)
            return self.ws_tail
        if need > self.ws.numel():
            self.ws = torch.empty(need + (1 << 20), dtype=torch.uint8, device=dev)
        return self.ws

    def gemm(self, q, sa, w, sw, y, cfg):
        M, K = q.shape
        N = w.shape[0]
        ws = self.ws_for(cfg, M, N, K)
        return self.L.fp8gemm_gemm(q.data_ptr(), sa.data_ptr(), w.data_ptr(), sw.data_ptr(), y.data_ptr(),
                                   M, N, K, ctypes.byref(cfg), ws.data_ptr(), ws.numel(), self.stream())

    def gemm_fn(self, q, sa, w, sw, y, cfg):
        """A closure with everything bound (for graph capture)."""
        M, K = q.shape
        N = w.shape[0]
        ws = self.ws_for(cfg, M, N, K)
        args = (q.data_ptr(), sa.data_ptr(), w.data_ptr(), sw.data_ptr(), y.data_ptr(), M, N, K,
                ctypes.byref(cfg), ws.data_ptr(), ws.numel())
        f = self.L.fp8gemm_gemm

        def run():
            st = f(*args, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
            if st:
                raise RuntimeError(self.L.fp8gemm_status_string(st))
        return run


# ---------------------------------------------------------------- inputs and references
def torch_quant(x):
    M, K = x.shape
    g = x.float().view(M, K // 128, 128)
    amax = g.abs().amax(-1).clamp(min=1e-4)
    # IEEE division by a tensor: `amax / 448.0` would multiply by a rounded reciprocal.
    s = amax / torch.full_like(amax, 448.0)
    return (g / s[..., None]).to(FP8).view(M, K), s


def make_inputs(M, N, K, seed):
    g = torch.Generator(device=dev).manual_seed(seed)
    rs = torch.exp(torch.randn(M, 1, device=dev, generator=g))          # per-row variation
    cs = torch.exp(0.5 * torch.randn(1, K, device=dev, generator=g))    # per-column variation
    x = (torch.randn(M, K, device=dev, generator=g) * rs * cs).to(torch.bfloat16)
    nb, kb = (N + 127) // 128, K // 128
    w = (torch.randn(N, K, device=dev, generator=g) * 120).clamp(-448, 448).to(FP8)
    sw = torch.logspace(-4, -1, nb * kb, device=dev)[torch.randperm(nb * kb, device=dev, generator=g)].view(nb, kb).contiguous()
    return x, w, sw


def reference(q, sa, w, sw):
    M, K = q.shape
    N = w.shape[0]
    a = (q.float().view(M, K // 128, 128) * sa[:, :M].t()[..., None]).view(M, K)
    swf = sw.repeat_interleave(128, 0)[:N].repeat_interleave(128, 1)
    return a @ (w.float() * swf).t()


def metrics(y, r):
    yf = y.float()
    rel = ((yf - r).norm() / r.norm()).item()
    xx, yy = r.double(), yf.double()
    cd = (1 - 2 * (xx * yy).sum() / (xx * xx + yy * yy).sum()).item()
    return rel, cd, bool(torch.isnan(yf).any().item())


# ---------------------------------------------------------------- correctness
def applicable(c, M):
    kind, bm, bn, st, sp = c
    return True


def check(lib, args):
    Ms = [1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 200, 255, 256, 257, 511, 512, 1000, 2048, 4096]
    Ns = [128, 256, 1024, 4096, 5120, 10240]
    Ks = [128, 256, 4096, 5120, 8192]
    rnd = random.Random(0)
    shapes = []
    for M in Ms:
        for (N, K) in rnd.sample(list(itertools.product(Ns, Ks)), 3):
            shapes.append((M, N, K))
    shapes += [(M, 144, 384) for M in (1, 5, 70, 300)]            # N not a multiple of the tile
    shapes += [(M, N, K) for M in (1, 16, 2048) for (N, K) in [(10240, 5120), (5120, 8192), (51200, 5120), (5120, 25600)]]
    shapes += [(3, 4096, 4096 * 16)]  # long K
    if args.shapes:
        shapes = [tuple(int(v) for v in sh.split(",")) for sh in args.shapes]
    nfail = nrun = 0
    t0 = time.time()
    fails = []
    for si, (M, N, K) in enumerate(shapes):
        x, w, sw = make_inputs(M, N, K, seed=si + 1)
        q, sa = lib.quant(x)
        tq, ts = torch_quant(x)
        qok = torch.equal(q.view(torch.uint8), tq.view(torch.uint8)) and torch.equal(sa[:, :M].t(), ts)
        padnan = bool((sa[:, M:] == 0).all().item()) if sa.shape[1] > M else True  # pad zeroed
        if not (qok and padnan):
            qeq = torch.equal(q.view(torch.uint8), tq.view(torch.uint8))
            nd = int((q.view(torch.uint8) != tq.view(torch.uint8)).sum().item())
            fails.append(f"QUANT {M}x{K}: q_equal={qeq} ({nd} bytes differ) s_equal={torch.equal(sa[:, :M].t(), ts)} pad_zero={padnan}")
            nfail += 1
        r = reference(q, sa, w, sw)
        cfgs = []
        big = M * N * K > 2 ** 34
        for c in CONFIGS:
            kind, bm, bn, st, sp = c
            if big and kind in ("swap_ab", "swap_ab_sk", "small_m") and M > 256:
                continue  # slow and pointless, but still correct
            cfgs.append(cfg_of(kind, bm, bn, st, 1))
            if sp and not big and K >= 512:
                # 2: a 2-CTA cluster (DSMEM) sum where the schedule has one (the push, the
                # halves of the 2-warpgroup tiles, rank 0's pull); 3: the workspace.
                cfgs += [cfg_of(kind, bm, bn, st, s) for s in (2, 3)]
            if sp and not big and K >= 2048 and M <= 300:
                cfgs.append(cfg_of(kind, bm, bn, st, 12))  # > 8 splits: workspace + reduce kernel
            if kind == "persistent":
                # Split tails: the last round's tiles in 2 / 4 K ranges; on 7 SMs, several full
                # rounds before a split one.
                cfgs += [cfg_of(kind, bm, bn, st, 2), cfg_of(kind, bm, bn, st, 4)]
                if not big:
                    cfgs.append(cfg_of(kind, bm, bn, st, 3, 7))
        res = []
        for c in cfgs:
            y = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device=dev)
            st = lib.gemm(q, sa, w, sw, y, c)
            torch.cuda.synchronize()
            nrun += 1
            if st:
                fails.append(f"{M}x{N}x{K} {cfg_str(c)}: status {lib.L.fp8gemm_status_string(st).decode()}")
                nfail += 1
                continue
            rel, cd, nan = metrics(y, r)
            ok = rel <= 3e-3 and cd < 1e-3 and not nan
            res.append(rel)
            if not ok:
                nfail += 1
                fails.append(f"{M}x{N}x{K} {cfg_str(c)}: relerr {rel:.3g} calc_diff {cd:.3g} nan {nan}")
                print("  FAIL", fails[-1], flush=True)
        print(f"{M:5d} {N:6d} {K:6d} quant={'ok' if qok and padnan else 'FAIL'} configs={len(cfgs)} max relerr {max(res) if res else float('nan'):.2e}", flush=True)
    # dequant kernel
    for (N, K) in [(256, 384), (300, 200), (1000, 4096), (129, 7)]:
        w = (torch.randn(N, K, device=dev) * 100).clamp(-448, 448).to(FP8)
        sw = torch.rand((N + 127) // 128, (K + 127) // 128, device=dev) + 0.1
        out = torch.empty(N, K, dtype=torch.bfloat16, device=dev)
        st = lib.L.fp8gemm_dequant_weight(w.data_ptr(), sw.data_ptr(), out.data_ptr(), N, K, lib.stream())
        ref = (w.float() * sw.repeat_interleave(128, 0)[:N].repeat_interleave(128, 1)[:, :K]).to(torch.bfloat16)
        torch.cuda.synchronize()
        ok = st == 0 and torch.equal(out, ref)
        nrun += 1
        if not ok:
            nfail += 1
            fails.append(f"DEQUANT {N}x{K} status {st} equal {torch.equal(out, ref)}")
    # error codes
    y = torch.empty(4, 128, dtype=torch.bfloat16, device=dev)
    q = torch.empty(4, 2048, dtype=FP8, device=dev)
    sa = torch.empty(16, 4, device=dev)
    w = torch.empty(128, 2048, dtype=FP8, device=dev)
    sw = torch.empty(1, 16, device=dev)
    c = cfg_of("swap_ab", 8, 64, 8)
    L = lib.L
    codes = {
        "k%128": L.fp8gemm_gemm(q.data_ptr(), sa.data_ptr(), w.data_ptr(), sw.data_ptr(), y.data_ptr(), 4, 128, 200, ctypes.byref(c), None, 0, lib.stream()),
        "n%16": L.fp8gemm_gemm(q.data_ptr(), sa.data_ptr(), w.data_ptr(), sw.data_ptr(), y.data_ptr(), 4, 120, 256, ctypes.byref(c), None, 0, lib.stream()),
        "m=0": L.fp8gemm_gemm(q.data_ptr(), sa.data_ptr(), w.data_ptr(), sw.data_ptr(), y.data_ptr(), 0, 128, 256, ctypes.byref(c), None, 0, lib.stream()),
        "align": L.fp8gemm_gemm(q.data_ptr() + 1, sa.data_ptr(), w.data_ptr(), sw.data_ptr(), y.data_ptr(), 4, 128, 256, ctypes.byref(c), None, 0, lib.stream()),
        "config": L.fp8gemm_gemm(q.data_ptr(), sa.data_ptr(), w.data_ptr(), sw.data_ptr(), y.data_ptr(), 4, 128, 256, ctypes.byref(cfg_of("small_m", 64, 48, 8)), None, 0, lib.stream()),
        # no configuration: the caller always chooses one
        "null_cfg": L.fp8gemm_gemm(q.data_ptr(), sa.data_ptr(), w.data_ptr(), sw.data_ptr(), y.data_ptr(), 4, 128, 256, None, None, 0, lib.stream()),
        "kind0": L.fp8gemm_gemm(q.data_ptr(), sa.data_ptr(), w.data_ptr(), sw.data_ptr(), y.data_ptr(), 4, 128, 256, ctypes.byref(Cfg(0, 0, 0, 0, 1, 0)), None, 0, lib.stream()),
        "ws_bytes_null": int(L.fp8gemm_workspace_bytes(None, 4, 128, 2048) != 0),
        # 3+ splits reduce through the workspace (2 reduce inside a cluster: none needed)
        "workspace": L.fp8gemm_gemm(q.data_ptr(), sa.data_ptr(), w.data_ptr(), sw.data_ptr(), y.data_ptr(), 4, 128, 2048, ctypes.byref(cfg_of("swap_ab", 8, 64, 8, 12)), None, 0, lib.stream()),
        "ws_bytes_cluster": int(L.fp8gemm_workspace_bytes(ctypes.byref(cfg_of("swap_ab", 8, 64, 8, 2)), 4, 128, 2048) != 0),
    }
    want = {"k%128": 1, "n%16": 1, "m=0": 1, "align": 2, "config": 3, "null_cfg": 3, "kind0": 3, "ws_bytes_null": 0,
            "workspace": 7, "ws_bytes_cluster": 0}
    for k_, v in codes.items():
        nrun += 1
        if v != want[k_]:
            nfail += 1
            fails.append(f"status for {k_}: got {v}, want {want[k_]}")
    torch.cuda.synchronize()
    print(f"CHECK: {nrun} runs over {len(shapes)} shapes, {nfail} failures ({time.time() - t0:.1f}s wall)")
    for f in fails[:60]:
        print("  FAIL", f)
    return nfail


def sanitize(lib, args):
    """Small shapes through every schedule and both split-K reductions (run under
    compute-sanitizer). --quick: one launch per schedule (for racecheck)."""
    if args.quick:
        plan = [((130, 256, 1536), [("swap_ab", 8, 64, 8, 2), ("swap_ab", 16, 64, 8, 9), ("small_m", 64, 128, 8, 2),
                                    ("small_m", 64, 128, 6, 3), ("swap_ab_sk", 16, 64, 7, 2), ("warp_spec", 128, 128, 6, 3), ("warp_spec", 128, 128, 6, 2),
                                    ("persistent", 256, 128, 3, 1), ("small_m", 64, 64, 8, 1)])]
    else:
        shapes = [(5, 144, 384), (130, 256, 1536), (300, 272, 384)]
        plan = [(sh, [(k, bm, bn, st, sp) for (k, bm, bn, st, spok) in CONFIGS for sp in ([1, 2, 9] if spok else [1])])
                for sh in shapes]
    n = bad = 0
    for (M, N, K), cfgs in plan:
        x, w, sw = make_inputs(M, N, K, seed=M)
        q, sa = lib.quant(x)
        r = reference(q, sa, w, sw)
        for (kind, bm, bn, st, split) in cfgs:
            cfg = cfg_of(kind, bm, bn, st, split)
            y = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device=dev)
            s = lib.gemm(q, sa, w, sw, y, cfg)
            torch.cuda.synchronize()
            rel, cd, nan = metrics(y, r)
            n += 1
            if s or rel > 3e-3 or nan:
                bad += 1
                print(f"SANITIZE-RUN FAIL {M}x{N}x{K} {cfg_str(cfg)} status {s} rel {rel:.3g} nan {nan}")
    print(f"sanitize driver: {n} launches, {bad} wrong")


# ---------------------------------------------------------------- timing
def candidates(M, N, K, sms=132):
    KB = K // 128
    out = []
    def splits(tiles):
        res = {1}
        for target in (sms, 2 * sms, 3 * sms):
            s = max(1, min(KB // 2, round(target / tiles)))
            res.add(s)
        return sorted(res)
    if M <= 64:
        for bm in (8, 16, 32):
            if bm >= M or bm == 32:
                tiles = (N + 63) // 64 * ((M + bm - 1) // bm)
                for s in splits(tiles):
                    out.append(cfg_of("swap_ab", bm, 64, 8, s))
                if bm >= M:
                    break
    if M <= 256:
        for bn, st in ((64, 8), (128, 8), (128, 6)):
            tiles = (N + bn - 1) // bn * ((M + 63) // 64)
            for s in splits(tiles)[:2]:
                out.append(cfg_of("small_m", 64, bn, st, s))
    if 64 < M <= 1024:
        for bn, st in ((128, 6),):
            tiles = (N + bn - 1) // bn * ((M + 127) // 128)
            for s in splits(tiles)[:2]:
                out.append(cfg_of("warp_spec", 128, bn, st, s))
    if M > 128:
        for bm, st in ((128, 5), (256, 3)):
            out.append(cfg_of("persistent", bm, 128, st))
    return out


def focus_candidates(M, N, K, sms=132):
    out = []
    KB = K // 128
    fill = lambda tiles: max(1, min(8, KB // 4, round(sms / tiles)))
    if 16 < M <= 512:
        s = fill((M + 63) // 64 * ((N + 127) // 128))
        out.append(cfg_of("small_m", 64, 128, 6 if s >= 3 else 8, s))
        out.append(cfg_of("warp_spec", 128, 128, 6, fill((M + 127) // 128 * ((N + 127) // 128))))
    if M > 256:
        for bm, st in ((256, 3), (128, 5)):
            out.append(cfg_of("persistent", bm, 128, st))
    return out


def bench(lib, args):
    from triton.testing import do_bench_cudagraph
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import anchors
    shapes = [(m, 4096, 4096) for m in [1, 8, 16, 32, 64, 128, 160, 192, 256, 512, 1024, 2048, 4096, 8192]]
    if args.focus:
        shapes = [(m, 4096, 4096) for m in [1, 8, 16, 32, 64, 128, 192, 256, 512, 1024, 2048, 4096]]
    for (n, k) in [(10240, 5120), (5120, 8192), (51200, 5120), (5120, 25600)]:
        for m in [1, 16, 2048]:
            shapes.append((m, n, k))
    if args.shapes:
        shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes]
    print(f"{'M':>5} {'N':>6} {'K':>6} | {'ours hot':>8} {'cold':>7} {'best cfg':<22} | {'cuBLASLt':>8} {'cold':>7} | {'floor':>6} | hot/cub cold/cub cold/floor TF/s")
    rows = []
    for (M, N, K) in shapes:
        ncold = max(8, min(16, int(64e6 // (N * K)) + 2)) if M <= 256 else max(2, min(8, int(160e6 // (N * K)) + 1))
        x, w0, sw0 = make_inputs(M, N, K, seed=M + N)
        q, sa = lib.quant(x)
        ws = [(w0, sw0)] + [(w0.clone(), sw0.clone()) for _ in range(ncold - 1)]
        y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
        r = reference(q, sa, w0, sw0) if M * N * K < 2 ** 36 else None
        best = None
        cands = [cfg_parse(n) for n in args.only.split(",")] if args.only else (
            focus_candidates(M, N, K) if args.focus else candidates(M, N, K))
        for c in cands:
            f = lib.gemm_fn(q, sa, w0, sw0, y, c)
            try:
                f()
                torch.cuda.synchronize()
            except RuntimeError as e:
                continue
            if r is not None:
                rel, cd, nan = metrics(y, r)
                if rel > 3e-3 or nan:
                    print(f"   WRONG {cfg_str(c)} rel {rel:.3g}")
                    continue
            t = do_bench_cudagraph(f, rep=30, return_mode="median") * 1e3
            if best is None or t < best[0]:
                best = (t, c)
        c = best[1]
        fns = [lib.gemm_fn(q, sa, w_, s_, y, c) for (w_, s_) in ws]
        hot, cold = anchors.bench(fns[0], fns)
        # cuBLASLt blockwise
        cub = (float("nan"), float("nan"))
        qt, st_ = torch_quant(x)
        for name, mk in anchors.cublas_variants(qt, st_):
            try:
                fn = mk(w0, sw0)
                fn()
                torch.cuda.synchronize()
                cub = anchors.bench(fn, [mk(w_, s_) for (w_, s_) in ws])
                break
            except Exception:
                continue
        floor = max((N * K + M * K + 2 * M * N) / 4.25e12, 2 * M * N * K / 1300e12) * 1e6
        tf = 2 * M * N * K / (hot * 1e-6) / 1e12
        row = (M, N, K, hot, cold, cfg_str(c), cub[0], cub[1], floor)
        rows.append(row)
        print(f"{M:5d} {N:6d} {K:6d} | {hot:8.2f} {cold:7.2f} {cfg_str(c):<22} | {cub[0]:8.2f} {cub[1]:7.2f} | {floor:6.2f} | {hot / cub[0]:7.2f} {cold / cub[1]:8.2f} {cold / floor:10.2f} {tf:6.0f}", flush=True)
    return rows


def sweep_candidates(M, N, K, sms=132):
    """Every compiled config that can run (M, N, K), with a wider split-K range than `bench`."""
    KB = K // 128
    out = []
    for (kind, bm, bn, st, split_ok) in CONFIGS:
        if kind in ("swap_ab", "swap_ab_sk") and (M > 64 or (bm < M and bm != 32)):
            continue
        if kind == "small_m" and M > 256:
            continue
        if kind == "warp_spec" and (M <= 64 or M > 1024):
            continue
        if kind == "persistent" and M <= 128:
            continue
        for s in ([1, 2, 3, 4, 5, 6, 8, 10] if split_ok else [1]):
            if s <= max(1, KB // 2):
                out.append(cfg_of(kind, bm, bn, st, s))
    return out


def sweep(lib, args):
    """Hot and cold time of every config per shape (the data behind dispatch.rs), then the
    full linear (quant + GEMM, PDL) against the GEMM alone for the fastest config (cold)."""
    from triton.testing import do_bench_cudagraph
    shapes = [tuple(int(v) for v in s.split(",")) for s in (args.shapes or [])]
    print("SWEEP M N K cfg hot_us cold_us")
    for (M, N, K) in shapes:
        ncold = max(4, min(16, int(256e6 // (N * K)) + 1))
        x, w0, sw0 = make_inputs(M, N, K, seed=M + N)
        q, sa = lib.quant(x)
        ws = [(w0, sw0)] + [(w0.clone(), sw0.clone()) for _ in range(ncold - 1)]
        y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
        r = reference(q, sa, w0, sw0) if M * N * K < 2 ** 36 else None
        res = []
        cands = sweep_candidates(M, N, K)
        if args.only:  # exactly these, in this order
            cands = [cfg_parse(n) for n in args.only.split(",")]
        for c in cands:
            f = lib.gemm_fn(q, sa, w0, sw0, y, c)
            try:
                y.fill_(float("nan"))
                f()
                torch.cuda.synchronize()
            except RuntimeError:
                continue
            if r is not None:
                rel, cd, nan = metrics(y, r)
                if rel > 3e-3 or nan:
                    print(f"   WRONG {M}x{N}x{K} {cfg_str(c)} rel {rel:.3g} nan {nan}", flush=True)
                    continue
            fns = [lib.gemm_fn(q, sa, w_, s_, y, c) for (w_, s_) in ws]
            hot = do_bench_cudagraph(f, rep=20, return_mode="median") * 1e3
            def seq():
                for g in fns:
                    g()
            cold = do_bench_cudagraph(seq, rep=20, return_mode="median") * 1e3 / len(fns)
            res.append((cold, hot, cfg_str(c)))
            print(f"SWEEP {M} {N} {K} {cfg_str(c)} {hot:.2f} {cold:.2f}", flush=True)
        res.sort()
        if not res:
            continue
        if args.no_full:
            print(f"BEST {M} {N} {K} cold: {res[0][2]} {res[0][0]:.2f}", flush=True)
            continue
        # Full linear: bf16 x -> quant -> GEMM (the fastest config), against the GEMM alone.
        q2 = torch.empty_like(q)
        sa2 = torch.empty_like(sa)
        g_only = lib.gemm_fn(q2, sa2, w0, sw0, y, cfg_parse(res[0][2]))
        L, st = lib.L, lib
        def full():
            e = L.fp8gemm_quantize_act(x.data_ptr(), 0, q2.data_ptr(), sa2.data_ptr(), M, K,
                                       ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
            assert e == 0
            g_only()
        full()
        torch.cuda.synchronize()
        if r is not None:
            rel, cd, nan = metrics(y, r)
            assert rel < 3e-3 and not nan, f"full linear wrong: rel {rel} nan {nan}"
        tf = do_bench_cudagraph(full, rep=30, return_mode="median") * 1e3
        tg = do_bench_cudagraph(g_only, rep=30, return_mode="median") * 1e3
        print(f"BEST {M} {N} {K} cold: {res[0][2]} {res[0][0]:.2f} | full linear {tf:.2f} gemm {tg:.2f} (+{tf - tg:.2f})", flush=True)


def probe(lib, args):
    """Per-CTA timeline of one launch of each --only config (a build with EXTRA_FLAGS=-DFP8GEMM_TRACE;
    one tile per CTA): hot (same inputs as the warm-up) and cold (another weight copy, L2
    flushed by a 256 MB write). Times in us from the first CTA's entry: median / max over CTAs
    of entry, after the math warps' griddepcontrol.wait (after the main loop), first K block
    landed, last K block done, end. The records are the last launch's from the trace rings
    (fp8gemm_trace_dump, read by dev/trace_timeline.py)."""
    import tempfile
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import trace_timeline

    L = lib.L
    assert hasattr(L, "fp8gemm_trace_dump"), "no trace in this build (EXTRA_FLAGS=-DFP8GEMM_TRACE bash dev/build_lib.sh)"
    L.fp8gemm_trace_dump.argtypes = [ctypes.c_char_p]
    L.fp8gemm_trace_dump.restype = ctypes.c_int64
    dump = os.path.join(tempfile.mkdtemp(), "trace.bin")
    shapes = [tuple(int(v) for v in s.split(",")) for s in (args.shapes or [])]
    names = args.only.split(",") if args.only else []
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    print("PROBE M N K cfg temp ctas | entry wait first_kb last_kb end (median/max us) | span_us")
    for (M, N, K) in shapes:
        x, w0, sw0 = make_inputs(M, N, K, seed=M + N)
        q, sa = lib.quant(x)
        w1, sw1 = w0.clone(), sw0.clone()
        y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
        for c in sweep_candidates(M, N, K):
            if cfg_str(c) not in names:
                continue
            for temp in ("hot", "cold"):
                for _ in range(3):
                    lib.gemm(q, sa, w0, sw0, y, c)
                torch.cuda.synchronize()
                if temp == "cold":
                    flush.fill_(1)
                    torch.cuda.synchronize()
                ww, ss = (w1, sw1) if temp == "cold" else (w0, sw0)
                st = lib.gemm(q, sa, ww, ss, y, c)
                torch.cuda.synchronize()
                assert st == 0, L.fp8gemm_status_string(st)
                n_cta = ((M + c.block_m - 1) // c.block_m) * ((N + c.block_n - 1) // c.block_n) * max(1, c.split_k)
                if c.kind == KIND["persistent"]:  # one wave of at most the SM budget (stream-K: units = tiles x K blocks)
                    units = n_cta * ((K + 127) // 128) if c.split_k == -1 else n_cta
                    n_cta = min(units, c.num_sms or torch.cuda.get_device_properties(0).multi_processor_count)
                got = L.fp8gemm_trace_dump(dump.encode())
                assert got >= 0, f"trace dump: {got}"
                # GEMM records by entry time; the launches ran one after another, so the last
                # n_cta are this launch's CTAs.
                all_recs = trace_timeline.load(dump)
                recs = [r for r in all_recs if r[2] == 1][-n_cta:]
                nan = float("nan")
                t = torch.tensor([[t0] + [t0 + dd if dd else nan for dd in (d[0], d[1], d[2], d[3])]
                                  for t0, _, _, d, _, _ in recs], dtype=torch.float64)
                t = (t - t[:, 0].min()) / 1e3
                med, mx = t.nanmedian(dim=0).values, t.nan_to_num(-1.0).max(dim=0).values
                cols = " ".join(f"{med[i]:.2f}/{mx[i]:.2f}" for i in range(5))
                print(f"PROBE {M} {N} {K} {cfg_str(c)} {temp} {len(recs)} | {cols} | {mx[4]:.2f}", flush=True)
                # The tail: quantiles of entry and end (a late wave or a slow CTA shows here).
                qs = torch.tensor([0.1, 0.5, 0.9, 0.99, 1.0], dtype=torch.float64)
                for slot, name in ((0, "entry"), (2, "first_kb"), (4, "end")):
                    qv = torch.quantile(t[:, slot], qs)
                    print(f"  {name:8s} p10/p50/p90/p99/max " + " ".join(f"{v:.2f}" for v in qv), flush=True)
                probe_tiles(all_recs, min(r[0] for r in recs))


def probe_tiles(recs, launch_t0):
    """The per-tile records (tag 10, persistent schedules) of the launch that began at launch_t0:
    per role (whole tile / published piece / finished from pieces) medians, in us, of the start
    (from the launch's first entry), first K block landed and ns per K block after it, the
    fix-up (publish, or wait + add) and the end after it; then CTAs 0-3 and the 4 latest."""
    tiles = [r for r in recs if r[2] == 10 and r[0] >= launch_t0]
    if not tiles:
        return
    roles = {0: "whole", 1: "publish", 2: "finish"}
    rows = []
    for t0, _, _, d, _, cta in tiles:
        nkb, role = (cta >> 16) & 0xFF, cta >> 24
        start = (t0 - launch_t0) / 1e3
        first, last, fix, end = (v / 1e3 for v in d)
        per_kb = (last - first) / max(1, nkb - 1) * 1e3
        fix_us = (fix - last) if fix else 0.0
        rows.append((cta & 0xFFFF, role, nkb, start, first, per_kb, fix_us, end - (fix or last), start + end))
    med = lambda v: statistics.median(v) if v else float("nan")
    for role, name in roles.items():
        rr = [r for r in rows if r[1] == role]
        if rr:
            cols = " ".join(f"{med([r[i] for r in rr]):.2f}" for i in (2, 3, 4, 5, 6, 7, 8))
            print(f"  TILES {name:7s} n {len(rr):3d} | kb start first ns/kb fix epi done (medians): {cols}", flush=True)
    rows.sort(key=lambda r: (r[0], r[3]))
    late = sorted(rows, key=lambda r: -r[8])[:4]
    for r in [r for r in rows if r[0] < 4] + late:
        print(f"    cta {r[0]:3d} {roles[r[1]]:7s} kb {r[2]:3d} start {r[3]:6.2f} first +{r[4]:.2f} "
              f"{r[5]:.0f} ns/kb fix {r[6]:.2f} epi {r[7]:.2f} done {r[8]:6.2f}", flush=True)


def stages(lib, args):
    """Per-stage probe of the main loop of the --only configs (a build with
    EXTRA_FLAGS=-DFP8GEMM_TRACE_STAGES; kernels/include/fp8gemm/common/trace.cuh says what is stamped).
    One launch per shape, hot (after three warm-up launches on the same inputs) and cold
    (another weight copy, L2 flushed by a 256 MB write). Prints medians / p90 over the CTAs
    (< 264) and the steady-state K blocks (from the ring depth on) of, in ns:
      period    consumer cadence: full-barrier return of K block i+1 - of K block i
      c_wait    the consumer's full-barrier wait (data not there yet)
      mma       full-barrier return -> the stage's release (its last wgmma done)
      promote   release -> the K block's last promotion done
      p_wait    the producer's empty-barrier wait (no free stage)
      flight    loads issued -> the consumer past the stage's full barrier
      handoff   the stage's release -> its next loads issued (stages later)
    then the first K blocks one by one (ramp)."""
    assert args.only, "stages: name the configs (--only CFG,...)"
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    for spec in args.shapes or []:
        M, N, K = (int(v) for v in spec.split(","))
        cfgs = [cfg_parse(n) for n in args.only.split(",")]
        x, w0, sw0 = make_inputs(M, N, K, seed=M + N)
        q, sa = lib.quant(x)
        ops = (q, sa, w0, sw0, w0.clone(), sw0.clone())
        for c in cfgs:
            stages_one(lib, M, N, K, c, ops, flush)


def stages_one(lib, M, N, K, c, ops, flush):
    """One config of `stages` on operands (q, sa, hot w / sw, cold w / sw)."""
    vp = ctypes.c_void_p
    units = {1: "small_m", 2: "swap_ab", 3: "warp_specialized", 4: "persistent", 5: "swap_ab"}
    ctas, kbs = 264, 64  # the probe arrays' size (common/trace.cuh)
    read = getattr(lib.L, f"fp8gemm_stage_read_{units[c.kind]}", None)
    assert read is not None, "no stage probe in this build (EXTRA_FLAGS=-DFP8GEMM_TRACE_STAGES bash dev/build_lib.sh)"
    read.argtypes = [vp, vp, ctypes.c_int]
    read.restype = ctypes.c_int
    q, sa, w0, sw0, w1, sw1 = ops
    y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
    nkb = min(kbs, K // 128 // max(1, c.split_k))
    for temp in ("hot", "cold"):
        for _ in range(3):
            assert lib.gemm(q, sa, w0, sw0, y, c) == 0
        torch.cuda.synchronize()
        assert read(None, None, 1) == 0
        if temp == "cold":
            flush.fill_(1)
        torch.cuda.synchronize()
        ww, ss = (w1, sw1) if temp == "cold" else (w0, sw0)
        assert lib.gemm(q, sa, ww, ss, y, c) == 0
        torch.cuda.synchronize()
        prod = torch.zeros((ctas, kbs, 4), dtype=torch.int64)
        cons = torch.zeros((ctas, kbs, 4), dtype=torch.int64)
        assert read(prod.data_ptr(), cons.data_ptr(), 0) == 0
        used = torch.nonzero(cons[:, 0, 1]).flatten()
        # ns relative to the launch's first stamp (float64 keeps the ns exact)
        base = cons[used, 0, 0].min()
        p = (prod[used, :nkb] - base).double()
        t = (cons[used, :nkb] - base).double()
        p[prod[used, :nkb] == 0] = float("nan")
        t[cons[used, :nkb] == 0] = float("nan")
        s0 = min(c.stages, nkb - 2)
        m = {
            "period": t[:, s0 + 1:, 1] - t[:, s0:-1, 1],
            "c_wait": t[:, s0:, 1] - t[:, s0:, 0],
            "mma": t[:, s0:, 2] - t[:, s0:, 1],
            "promote": t[:, s0:, 3] - t[:, s0:, 2],
            "p_wait": p[:, s0:, 1] - p[:, s0:, 0],
            "flight": t[:, s0:, 1] - p[:, s0:, 1],
            "handoff": p[:, c.stages:, 1] - t[:, :nkb - c.stages, 2],
        }
        def qt(v, f):
            v = v.flatten()
            return torch.nanquantile(v, f).item() if v.numel() else float("nan")
        cols = " ".join(f"{k} {qt(v, 0.5):.0f}/{qt(v, 0.9):.0f}" for k, v in m.items())
        print(f"STAGES {M} {N} {K} {cfg_str(c)} {temp} ctas {len(used)} kb {nkb} | {cols}", flush=True)
        ramp = " ".join(f"{qt(t[:, i, 1], 0.5) / 1e3:.2f}" for i in range(min(nkb, 12)))
        print(f"  full-barrier return of K blocks 0..11, median us from the first consumer's start: {ramp}", flush=True)


def torch_blockwise_fn(q, sa, w, sw, M):
    """torch._scaled_mm with 1x128 / 128x128 block scales (cuBLASLt), checked against the
    reference; None if no argument layout is accepted."""
    K = q.shape[1]
    qa = q.view(FP8)
    sa_cm = torch.empty(K // 128, M, device=dev).t()
    sa_cm.copy_(sa[:, :M].t())  # ours is [K/128][m_pad]
    r = reference(q, sa, w, sw) if M * w.shape[0] * K < 2 ** 36 else None
    for tr in (lambda t: t, lambda t: t.t(), lambda t: t.t().contiguous()):
        sb = tr(sw)
        f = lambda sb=sb: torch._scaled_mm(qa, w.view(FP8).t(), scale_a=sa_cm, scale_b=sb, out_dtype=torch.bfloat16)
        try:
            o = f()
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001
            continue
        if r is None or metrics(o, r)[0] < 2e-2:
            return f
    return None


def power(lib, args):
    """Steady-state time, SM clock and board power of each --only config per shape: a CUDA graph
    of back-to-back launches (same operands) replayed for ~2 s while nvidia-smi samples every
    50 ms (the first 0.5 s dropped). Whether a large-M GEMM is held by the board's power cap
    (clock below its maximum at ~690 W: then only less energy per GEMM makes it faster) or by
    something else (full clock, power below the cap). Prints us per GEMM, median clock (MHz),
    median power (W) and energy per GEMM (mJ = W x us / 1000)."""
    import subprocess
    import tempfile
    shapes = [tuple(int(v) for v in s.split(",")) for s in (args.shapes or [])]
    names = args.only.split(",") if args.only else []
    print("POWER M N K cfg data us_per_gemm clock_mhz power_w mj_per_gemm")
    for (M, N, K) in shapes:
        x, w0, sw0 = make_inputs(M, N, K, seed=M + N)
        q, sa = lib.quant(x)
        if args.data == "codes":  # uniform e4m3 codes, no NaN, exponent < 12
            def codes(shape):
                b = torch.randint(0, 256, shape, dtype=torch.int32, device=dev)
                b = torch.where((b & 0x78) > 0x58, b & 0xCF, b)
                return b.to(torch.uint8).view(FP8)
            q, w0 = codes(q.shape), codes(w0.shape)
        elif args.data == "zeros":
            q, w0 = torch.zeros_like(q), torch.zeros_like(w0)
        y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
        for name in names:
            if name == "torch_lt":  # torch's cuBLASLt blockwise (as anchors.py calls it), same operands
                f = torch_blockwise_fn(q, sa, w0, sw0, M)
                if f is None:
                    print(f"POWER {M} {N} {K} torch_lt: no blockwise _scaled_mm variant ran", flush=True)
                    continue
            else:
                f = lib.gemm_fn(q, sa, w0, sw0, y, cfg_parse(name))
            f()
            torch.cuda.synchronize()
            reps = max(1, int(2e-3 / (2.0 * M * N * K / 1e15)))  # ~2 ms of work per replay at ~1 PFLOP/s
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(reps):
                    f()
            g.replay()
            torch.cuda.synchronize()
            log = tempfile.NamedTemporaryFile(suffix=".csv", delete=False).name
            smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                                    "-lms", "50", "-f", log])
            t_start = time.time()
            n = 0
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            while time.time() - t_start < 0.5:  # settle
                g.replay()
                torch.cuda.synchronize()
            e0.record()
            t1 = time.time()
            while time.time() - t1 < 2.0:
                g.replay()
                n += 1
                if n % 8 == 0:
                    torch.cuda.synchronize()
            e1.record()
            torch.cuda.synchronize()
            smi.terminate()
            smi.wait()
            us = e0.elapsed_time(e1) * 1e3 / (n * reps)
            rows = []
            with open(log) as fh:
                for line in fh:
                    parts = [v.strip() for v in line.split(",")]
                    try:
                        rows.append((float(parts[0]), float(parts[1])))
                    except (ValueError, IndexError):
                        pass
            os.unlink(log)
            rows = rows[len(rows) // 4:]  # the settle part
            clk = sorted(r[0] for r in rows)[len(rows) // 2] if rows else float("nan")
            pw = sorted(r[1] for r in rows)[len(rows) // 2] if rows else float("nan")
            print(f"POWER {M} {N} {K} {name} {args.data} {us:.2f} {clk:.0f} {pw:.0f} {pw * us / 1e3:.1f}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lib", default="./libfp8gemm.so")
    p.add_argument("mode", choices=["check", "sanitize", "bench", "sweep", "probe", "stages", "power", "all"])
    p.add_argument("--shapes", nargs="*")
    p.add_argument("--quick", action="store_true", help="sanitize: one launch per schedule")
    p.add_argument("--only", help="bench / sweep / probe / stages / power: only these configs (comma-separated names as printed)")
    p.add_argument("--data", default="randn", choices=["randn", "codes", "zeros"],
                   help="power: operands (randn quantized as anchors.py and bench.rs do, uniform e4m3 codes, zeros)")
    p.add_argument("--no-full", action="store_true", help="sweep: skip the full-linear timing")
    p.add_argument("--focus", action="store_true", help="bench: a few likely configs per shape")
    args = p.parse_args()
    lib = Lib(os.path.abspath(args.lib))
    print(torch.cuda.get_device_name(), torch.__version__)
    if args.mode in ("check", "all"):
        check(lib, args)
    if args.mode == "sanitize":
        sanitize(lib, args)
    if args.mode in ("bench", "all"):
        bench(lib, args)
    if args.mode == "probe":
        probe(lib, args)
    if args.mode == "stages":
        stages(lib, args)
    if args.mode == "sweep":
        sweep(lib, args)
    if args.mode == "power":
        power(lib, args)


if __name__ == "__main__":
    main()
