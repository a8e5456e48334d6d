// The activation operand of a swap-AB tile quantized inside the GEMM (kQuantIn schedules):
// instead of TMA-loading a quantized (q, sa) written by a separate quantizer launch, the TMA
// thread loads the bf16 activation tile of each K block into the stage (the B slot is twice as
// big, pipeline.cuh) and two warps of the producer warpgroup quantize it there with the
// contract's arithmetic (act_quant.cuh: bit-identical to fp8gemm_quantize_act), writing the
// e4m3 tile in place (128B-swizzled, as TMA would) and the token scales, then arrive on the
// stage's "quantized" barrier, which the math warps wait on. At decode sizes the quantizer
// launch was a large part of a full linear (its launch gap + ~1.5 us body).
//
// Why TMA and not the quantizing threads' own loads (session 18's version): every thread that
// signals a stage (mbarrier arrive = release, fence.proxy.async) first waits for all of its own
// outstanding loads, so register prefetches of later K blocks were exposed each stage: measured
// on the H200 at 1 x 51200 x 5120, 108 us vs 65 us for quantizer launch + GEMM (session 19).
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

// The e4m3 codes of (v0 / s, v1 / s) exactly as cvt.rn.satfinite(div_rn(v, s)) gives them, from
// the approximate quotients v * rs (rs ~ 1 / s): RN(v / s) lies within 2^-22 (relative) of v * rs,
// and rounding to e4m3 is monotonic, so when both ends of v * rs * (1 -+ 2^-19) round to the same
// codes, so does RN(v / s). Otherwise (a quotient at an e4m3 rounding midpoint: ~0.35 % of bf16
// values, whose 8-bit significands often divide to exact ties; so ~half of the 256-value warp
// passes take this branch) or for a non-finite scale, the exact divisions. CPU check of the
// claim: format.rs, fast_quotient_codes_equal_the_divided_ones. Eight IEEE divisions per pass (each a
// branchy sequence, issued one after another) made the quantizing warps, which redo the whole
// activation for every tile, the kernel's bottleneck: 1 x 51200 x 5120 took 109 us vs 65 us for
// the quantizer launch + GEMM (session 19).
__device__ __forceinline__ uint16_t quantize_pair(float v0, float v1, float s, float rs) {
  constexpr float kLo = 1.f - 0x1p-19f, kHi = 1.f + 0x1p-19f;
  const float q0 = v0 * rs, q1 = v1 * rs;
  const uint16_t lo = ptx::cvt_e4m3x2(q0 * kLo, q1 * kLo);
  const uint16_t hi = ptx::cvt_e4m3x2(q0 * kHi, q1 * kHi);
  if (lo == hi && s < INFINITY) return lo;  // (NaN scales fail the comparison)
  return ptx::cvt_e4m3x2(ptx::div_rn(v0, s), ptx::div_rn(v1, s));
}

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
          out.x = quantize_pair(v[0], v[1], s, rs) | (uint32_t(quantize_pair(v[2], v[3], s, rs)) << 16);
          out.y = quantize_pair(v[4], v[5], s, rs) | (uint32_t(quantize_pair(v[6], v[7], s, rs)) << 16);
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
