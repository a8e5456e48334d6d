// The activation operand of a swap-AB tile quantized inside the GEMM (kQuantIn schedules):
// instead of TMA-loading a quantized (q, sa) written by a separate quantizer launch, two warps
// of the producer warpgroup read the bf16 activation x of each K block, quantize it with the
// contract's arithmetic (act_quant.cuh: bit-identical to fp8gemm_quantize_act) and write the
// stage's B tile (128B-swizzled, as TMA would) and its token scales. At decode sizes the
// quantizer launch was a large part of a full linear (its launch gap + ~1.5 us body).
#pragma once
#include <cuda_bf16.h>
#include <cstdint>

#include "act_quant.cuh"
#include "pipeline.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/tma.cuh"
#include "scheduler.cuh"

namespace fp8gemm {

// Producer warps 2-3 quantize (warp 0 issues the TMA loads, warp 1 the paced first fill); each
// arrives once per stage on the stage's full barrier.
constexpr int kQuantWarps = 2;
constexpr int kQuantThreads = kQuantWarps * 32;
// K blocks of x each thread keeps in flight (registers): 4 cover an L2 round trip at one CTA
// per SM (~190 ns per stage) and keep the 8-token kernel at 80 registers, three CTAs per SM
// like the plain tile (5 took 87).
constexpr int kQuantDepth = 4;

// One 128-wide group (token, K block) is 16 lanes x 8 values, as in quantize_act_kernel; a pass
// of the 64 threads covers 4 tokens. `qt` = thread index among the quantizing threads.
// Waits for the previous kernel (x is its output) before the first read of x.
template <int TN, class Ring, class Sched>
__device__ __forceinline__ void quantize_operand(const Ring& ring, Sched sched,
                                                 const __nv_bfloat16* __restrict__ x, int m, int k,
                                                 int qt) {
  static_assert(TN % 4 == 0, "whole passes of 4 tokens");
  constexpr int kPasses = TN / 4;
  const int sub = qt % 16, tok_in = qt / 16, lane = qt % 32;
  RingState<Ring::kStages> st;
  Tile t;
  ptx::griddep_wait();
  while (sched.next(t)) {
    const int nkb = t.kb1 - t.kb0;
    // 16 bytes (8 bf16) of token col0 + 4p + tok_in, K block kb0 + i; zeros past m or nkb.
    auto load = [&](uint4 (&r)[kPasses], int i) {
#pragma unroll
      for (int p = 0; p < kPasses; ++p) {
        const int tok = t.col0 + 4 * p + tok_in;
        r[p] = make_uint4(0, 0, 0, 0);
        if (i < nkb && tok < m)
          r[p] = *reinterpret_cast<const uint4*>(x + static_cast<int64_t>(tok) * k +
                                                 static_cast<int64_t>(t.kb0 + i) * kBlockK + sub * 8);
      }
    };
    uint4 xr[kQuantDepth][kPasses];
#pragma unroll
    for (int d = 0; d < kQuantDepth; ++d) load(xr[d], d);
    for (int i0 = 0; i0 < nkb; i0 += kQuantDepth) {
#pragma unroll
      for (int d = 0; d < kQuantDepth; ++d) {
        const int i = i0 + d;
        if (i >= nkb) break;
        ptx::mbarrier_wait(ring.empty(st.stage), st.phase ^ 1);
        uint8_t* b = ring.b(st.stage);
        float* sa = ring.scales(st.stage);
#pragma unroll
        for (int p = 0; p < kPasses; ++p) {
          const int r = 4 * p + tok_in;  // token row of the tile
          const bool valid = t.col0 + r < m;
          const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&xr[d][p]);
          float v[8];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const float2 f = __bfloat1622float2(h[j]);
            v[2 * j] = f.x;
            v[2 * j + 1] = f.y;
          }
          float amax = 0.f;
#pragma unroll
          for (int j = 0; j < 8; ++j) amax = max_nan(amax, fabsf(v[j]));
#pragma unroll
          for (int o = 8; o > 0; o /= 2) amax = max_nan(amax, __shfl_xor_sync(0xffffffffu, amax, o));
          // Rows past m: zero codes and a zero scale, as TMA's out-of-bounds fill gives.
          const float s = valid ? act_scale(amax) : 0.f;
          uint2 out = make_uint2(0, 0);
          if (valid) {
            out.x = ptx::cvt_e4m3x2(ptx::div_rn(v[0], s), ptx::div_rn(v[1], s)) |
                    (uint32_t(ptx::cvt_e4m3x2(ptx::div_rn(v[2], s), ptx::div_rn(v[3], s))) << 16);
            out.y = ptx::cvt_e4m3x2(ptx::div_rn(v[4], s), ptx::div_rn(v[5], s)) |
                    (uint32_t(ptx::cvt_e4m3x2(ptx::div_rn(v[6], s), ptx::div_rn(v[7], s))) << 16);
          }
          // 128B swizzle: 16-byte chunk c of row r sits at chunk c ^ (r % 8).
          const int chunk = (sub >> 1) ^ (r & 7);
          *reinterpret_cast<uint2*>(b + r * kBlockK + chunk * 16 + (sub & 1) * 8) = out;
          if (sub == 0) sa[r] = s;
        }
        // Our generic-proxy writes become visible to wgmma (async proxy), then the stage is ours.
        ptx::fence_proxy_async_shared();
        __syncwarp();
        if (lane == 0) ptx::mbarrier_arrive(ring.full(st.stage));
        load(xr[d], i + kQuantDepth);
        st.advance();
      }
    }
  }
}

}  // namespace fp8gemm
