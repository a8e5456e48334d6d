// The activation operand of a swap-AB tile quantized inside the GEMM (kQuantIn schedules):
// instead of TMA-loading a quantized (q, sa) written by a separate quantizer launch, the TMA
// thread loads the bf16 activation tile of each K block into the stage (the B slot is twice as
// big, pipeline.cuh) and two warps of the producer warpgroup quantize it there with the
// contract's arithmetic (act_quant.cuh: bit-identical to fp8gemm_quantize_act), writing the
// e4m3 tile in place (128B-swizzled, as TMA would) and the token scales, then arrive on the
// stage's "quantized" barrier, which the math warps wait on. At decode sizes the quantizer
// launch was a large part of a full linear (its launch gap + ~1.5 us body).
//
// Session 18's version had the quantizing threads load x themselves (register prefetch) and one
// arrive per warp: racecheck flagged the scale handoff, and it needed 79 registers (now 40-43).
// Staging by TMA did not change its speed (session 19): what costs is the quantization itself,
// redone by every tile for its whole K range — still 1.1-2.1x slower than quantizer + GEMM.
#pragma once
#include <cuda_bf16.h>
#include <cstdint>

#include "act_quant.cuh"
#include "pipeline.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/tma.cuh"
#include "scheduler.cuh"

namespace fp8gemm {

// Producer warps 2-3 quantize (warp 0 issues the TMA loads, warp 1 the paced first fill).
constexpr int kQuantWarps = 2;
constexpr int kQuantThreads = kQuantWarps * 32;
// Named barrier of the quantizing warps (the math warpgroup uses 1 and 2).
constexpr int kQuantBarrier = 15;

// One 128-wide group (token, K block) is 16 lanes x 8 values, as in quantize_act_kernel; a pass
// of the 64 threads covers 4 tokens. `qt` = thread index among the quantizing threads.
template <int TN, class Ring, class Sched>
__device__ __forceinline__ void quantize_operand(const Ring& ring, Sched sched, int m, int qt) {
  static_assert(TN % 4 == 0, "whole passes of 4 tokens");
  static_assert(Ring::kBBytes == TN * kBlockK * 2, "a kQuantIn ring (bf16 B slots)");
  constexpr int kPasses = TN / 4;
  const int sub = qt % 16, tok_in = qt / 16;
  RingState<Ring::kStages> st;
  Tile t;
  while (sched.next(t)) {
    for (int i = t.kb0; i < t.kb1; ++i) {
      ptx::mbarrier_wait(ring.full(st.stage), st.phase);  // bf16 tile (and weights) landed
      uint8_t* b = ring.b(st.stage);
      float* sa = ring.scales(st.stage);
      // 16 bytes (8 bf16) of token row 4p + tok_in per pass; rows past m are TMA's zero fill.
      uint4 xr[kPasses];
#pragma unroll
      for (int p = 0; p < kPasses; ++p)
        xr[p] = *reinterpret_cast<const uint4*>(b + (4 * p + tok_in) * kBlockK * 2 + sub * 16);
      // The e4m3 rows overwrite the bf16 rows in place: every read first.
      ptx::named_barrier_sync(kQuantBarrier, kQuantThreads);
#pragma unroll
      for (int p = 0; p < kPasses; ++p) {
        const int r = 4 * p + tok_in;  // token row of the tile
        const bool valid = t.col0 + r < m;
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&xr[p]);
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
        // Rows past m: zero codes and a zero scale, as the separate quantizer's padding.
        const float s = valid ? act_scale(amax) : 0.f;
        uint2 out = make_uint2(0, 0);
        if (valid) {
          const float rs = ptx::rcp_approx(s);
          out.x = quantize_pair(v[0], v[1], s, rs) |
                  (uint32_t(quantize_pair(v[2], v[3], s, rs)) << 16);
          out.y = quantize_pair(v[4], v[5], s, rs) |
                  (uint32_t(quantize_pair(v[6], v[7], s, rs)) << 16);
        }
        // 128B swizzle: 16-byte chunk c of row r sits at chunk c ^ (r % 8).
        const int chunk = (sub >> 1) ^ (r & 7);
        *reinterpret_cast<uint2*>(b + r * kBlockK + chunk * 16 + (sub & 1) * 8) = out;
        if (sub == 0) sa[r] = s;
      }
      // Our generic-proxy writes become visible to wgmma (async proxy); each writer releases.
      ptx::fence_proxy_async_shared();
      ptx::mbarrier_arrive(ring.qfull(st.stage));
      st.advance();
    }
  }
}

}  // namespace fp8gemm
