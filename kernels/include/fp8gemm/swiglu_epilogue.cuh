// The epilogue of the gated swap-AB schedule (kOutSwiGluQuant): the MLP's SiLU(gate) * up and
// the down projection's activation quantization, applied to the gate/up GEMM's accumulators
// instead of a separate kernel reading the bf16 GEMM output back.
//
// A CTA holds 64 features x TN tokens of both halves: wave 0 = gate rows f0 .. f0+63, wave 1 =
// the up rows of the same features, in the same fragment positions (so gate and up of an
// element sit in one thread). A 128-feature quantization group spans two CTAs: they form a
// cluster (2, 1, 1) and exchange their per-token amax through distributed shared memory.
// Every rounding step is the composed path's (GEMM output rounded to bf16, candle's bf16
// silu and mul, the quantizer's scale and conversion): the result is bit-identical to
// fp8gemm_gemm followed by fp8gemm_swiglu_quant.
#pragma once
#include <cuda_bf16.h>
#include <cstdint>

#include "act_quant.cuh"
#include "ptx/mbarrier.cuh"

namespace fp8gemm {

// Shared memory the epilogue uses (floats): per-warp amax [4][TN], the CTA's amax [TN] (read by
// the peer) and the token scales [TN].
template <int TN>
constexpr int swiglu_scratch_floats() { return 6 * TN; }

// Called by the 128 threads of the math warpgroup; the producer warpgroup must take part in the
// two cluster barriers. `gate`/`up`: the m64nTN fragments (d[4j + 2hh + e] = feature
// (warp%4)*16 + lane/4 + 8hh, token 8j + 2(lane%4) + e). f0: the tile's first feature (a
// multiple of 64); q: [m][inter] e4m3; sa: [inter/128][m_pad] f32 (padding rows zeroed; needs
// m_pad <= TN).
template <int TN>
__device__ __forceinline__ void swiglu_quant_epilogue(const float* gate, const float* up, int f0,
                                                      int m, int inter, float* scratch,
                                                      uint8_t* __restrict__ q,
                                                      float* __restrict__ sa) {
  constexpr int kAcc = TN / 2;
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  const int r = warp * 16 + lane / 4;  // feature in the tile (and r + 8)
  const int c = (lane % 4) * 2;        // token in each n8 group (and c + 1)

  // h = bf16(silu(bf16 gate)) * bf16 up, rounded as the bf16 GEMM output would have been.
  float h[kAcc];
#pragma unroll
  for (int x = 0; x < kAcc; x += 2) {
    const float2 v = silu_mul_bf16x2(__floats2bfloat162_rn(gate[x], gate[x + 1]),
                                     __floats2bfloat162_rn(up[x], up[x + 1]));
    h[x] = v.x;
    h[x + 1] = v.y;
  }

  // Per-token amax: my two features, then the 8 lanes sharing my tokens, then the 4 warps.
  float* warp_max = scratch;
  float* cta_max = scratch + 4 * TN;
  float* scale = scratch + 5 * TN;
  float am[TN / 8][2];
#pragma unroll
  for (int j = 0; j < TN / 8; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float a = max_nan(max_nan(0.f, fabsf(h[4 * j + e])), fabsf(h[4 * j + 2 + e]));
#pragma unroll
      for (int o = 4; o < 32; o *= 2) a = max_nan(a, __shfl_xor_sync(0xffffffffu, a, o));
      am[j][e] = a;
    }
  if (lane < 4) {
#pragma unroll
    for (int j = 0; j < TN / 8; ++j) {
      warp_max[warp * TN + 8 * j + c] = am[j][0];
      warp_max[warp * TN + 8 * j + c + 1] = am[j][1];
    }
  }
  ptx::named_barrier_sync(1, 128);
  if (t < TN)
    cta_max[t] = max_nan(max_nan(warp_max[t], warp_max[TN + t]),
                         max_nan(warp_max[2 * TN + t], warp_max[3 * TN + t]));
  ptx::cluster_sync();  // both CTAs' amax published
  const uint32_t rank = ptx::cluster_ctarank();
  if (t < TN) {
    const float peer = ptx::ld_shared_cluster_f32(ptx::map_shared_to_rank(cta_max + t, rank ^ 1));
    scale[t] = act_scale(max_nan(cta_max[t], peer));  // max is symmetric: both CTAs agree
  }
  ptx::named_barrier_sync(1, 128);

#pragma unroll
  for (int j = 0; j < TN / 8; ++j)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int tok = 8 * j + c + e;
        if (tok < m)
          q[static_cast<int64_t>(tok) * inter + f0 + r + 8 * hh] =
              quantize_e4m3(h[4 * j + 2 * hh + e], scale[tok]);
      }
  // The group's scales (rank 0 of the pair), zeros in the padding rows m .. m_pad.
  const int m_pad = (m + 3) / 4 * 4;
  if (rank == 0 && t < m_pad) sa[static_cast<int64_t>(f0 / 128) * m_pad + t] = t < m ? scale[t] : 0.f;
  ptx::cluster_sync();  // the peer is done reading cta_max
}

}  // namespace fp8gemm
