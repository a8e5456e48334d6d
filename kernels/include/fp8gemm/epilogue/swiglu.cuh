// The epilogue of the gated swap-AB schedule (kOutSwiGluQuant): the MLP's SiLU(gate) * up and
// the down projection's activation quantization, applied to the gate/up GEMM's accumulators
// instead of a separate kernel reading the bf16 GEMM output back.
//
// A CTA holds 128 features x TN tokens of both halves in the same fragment positions: waves 0-1
// = gate rows f0 .. f0+127, waves 2-3 = their up rows. The whole 128-feature quantization group
// sits in one CTA: no cluster (a cluster launch costs ~4.7 us in the PDL-chained decode step).
// Every rounding step is the composed path's (GEMM output rounded to bf16, candle's bf16
// silu and mul, the quantizer's scale and conversion): the result is bit-identical to
// fp8gemm_gemm followed by fp8gemm_swiglu_quant.
#pragma once
#include <cuda_bf16.h>
#include <cstdint>

#include "fp8gemm/common/act_quant.cuh"
#include "fp8gemm/ptx/mbarrier.cuh"

namespace fp8gemm {

// swiglu_quant_tile: called by the 128 threads of the math warpgroup. `acc`: the tile's
// accumulators, four m64nTN fragments of TN / 2 floats each (d[4j + 2hh + e] = MMA row
// (warp%4)*16 + lane/4 + 8hh of the wave, token 8j + 2(lane%4) + e): the two gate waves, then
// the two up waves. f0: the tile's first feature (a multiple of 128); q: the tile's first token
// row of [.][inter] e4m3, rows < m written; sa_group: the 128-feature group's scales of the
// tile's first token, written for t < sa_rows (zeros from m on). `scratch`: 6 * TN floats of
// shared memory (per-warp amax [4][TN], then the token scales [TN] at 5 * TN).
// swiglu_quant_core: the work of both, the group's scales stored by `store_scales(t, scale)`
// (thread t of the warpgroup, the tile's TN token scales).
template <int TN, class StoreScales>
__device__ __forceinline__ void swiglu_quant_core(const float* acc, int f0, int m, int inter,
                                                  float* scratch, uint8_t* __restrict__ q,
                                                  StoreScales store_scales) {
  constexpr int kAcc = TN / 2;
  constexpr int kGW = 2;  // waves holding gate rows
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  const int r = warp * 16 + lane / 4;  // feature in the wave (and r + 8)
  const int c = (lane % 4) * 2;        // token in each n8 group (and c + 1)

  float* warp_max = scratch;
  float* scale = scratch + 5 * TN;
  float up_v[kGW][kAcc];
#pragma unroll
  for (int g = 0; g < kGW; ++g)
#pragma unroll
    for (int x = 0; x < kAcc; ++x) up_v[g][x] = acc[(kGW + g) * kAcc + x];

  // h = bf16(silu(bf16 gate)) * bf16 up, rounded as the bf16 GEMM output would have been.
  float h[kGW][kAcc];
#pragma unroll
  for (int g = 0; g < kGW; ++g)
#pragma unroll
    for (int x = 0; x < kAcc; x += 2) {
      const float2 v = silu_mul_bf16x2(__floats2bfloat162_rn(acc[g * kAcc + x], acc[g * kAcc + x + 1]),
                                       __floats2bfloat162_rn(up_v[g][x], up_v[g][x + 1]));
      h[g][x] = v.x;
      h[g][x + 1] = v.y;
    }

  // Per-token amax: my features, then the 8 lanes sharing my tokens, then the 4 warps.
  float am[TN / 8][2];
#pragma unroll
  for (int j = 0; j < TN / 8; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float a = 0.f;
#pragma unroll
      for (int g = 0; g < kGW; ++g)
        a = max_nan(max_nan(a, fabsf(h[g][4 * j + e])), fabsf(h[g][4 * j + 2 + e]));
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
    scale[t] = act_scale(max_nan(max_nan(warp_max[t], warp_max[TN + t]),
                                 max_nan(warp_max[2 * TN + t], warp_max[3 * TN + t])));
  ptx::named_barrier_sync(1, 128);

#pragma unroll
  for (int g = 0; g < kGW; ++g)
#pragma unroll
    for (int j = 0; j < TN / 8; ++j)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int tok = 8 * j + c + e;
          if (tok < m)
            q[static_cast<int64_t>(tok) * inter + f0 + 64 * g + r + 8 * hh] =
                quantize_e4m3(h[g][4 * j + 2 * hh + e], scale[tok]);
        }
  store_scales(t, scale);
}

template <int TN>
__device__ __forceinline__ void swiglu_quant_tile(const float* acc, int f0, int m, int inter,
                                                  float* scratch, uint8_t* __restrict__ q,
                                                  float* __restrict__ sa_group, int sa_rows) {
  swiglu_quant_core<TN>(acc, f0, m, inter, scratch, q, [&](int t, const float* scale) {
    if (t < sa_rows) sa_group[t] = t < m ? scale[t] : 0.f;  // zeros in the rows m .. sa_rows
  });
}

// The dense gated tile: every token (m <= TN; q [m][inter], sa [inter/128][m_pad]), the
// padding rows m .. m_pad of sa zeroed.
template <int TN>
__device__ __forceinline__ void swiglu_quant_epilogue(const float* acc, int f0, int m, int inter,
                                                      float* scratch, uint8_t* __restrict__ q,
                                                      float* __restrict__ sa) {
  swiglu_quant_core<TN>(acc, f0, m, inter, scratch, q, [&](int t, const float* scale) {
    // The group's scales, zeros in the padding rows m .. m_pad.
    const int m_pad = (m + 3) / 4 * 4;
    if (t < m_pad) sa[static_cast<int64_t>(f0 / 128) * m_pad + t] = t < m ? scale[t] : 0.f;
  });
}

}  // namespace fp8gemm
