// The epilogue of the gated swap-AB schedule (kOutSwiGluQuant): the MLP's SiLU(gate) * up and
// the down projection's activation quantization, applied to the gate/up GEMM's accumulators
// instead of a separate kernel reading the bf16 GEMM output back.
//
// A CTA holds kGateRows features x TN tokens of both halves in the same fragment positions:
//   kGateRows = 128: waves 0-1 = gate rows f0 .. f0+127, waves 2-3 = their up rows: the whole
//                    128-feature quantization group in one CTA, no cluster (a cluster launch
//                    costs ~4.7 us in the PDL-chained decode step, docs/KERNELS.md session 6);
//   kGateRows = 64:  wave 0 = gate rows f0 .. f0+63, wave 1 = their up rows (gate and up of an
//                    element sit in one thread);
//   kGateRows = 32:  one wave, warps 0-1 = gate rows f0 .. f0+31, warps 2-3 = their up rows
//                    (warp w + 2 passes its fragment to warp w through shared memory).
// With kGateRows < 128 a group spans 128 / kGateRows CTAs: they form a cluster and exchange
// their per-token amax through distributed shared memory.
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
// the peers), the token scales [TN], and (kGateRows = 32) the up fragments of warps 2-3.
template <int TN, int kGateRows>
constexpr int swiglu_scratch_floats() { return 6 * TN + (kGateRows == 32 ? 2 * (TN / 2) * 32 : 0); }

// Called by the 128 threads of the math warpgroup; with kGateRows < 128 the producer warpgroup
// must take part in the two cluster barriers. `acc`: the tile's accumulators, kWaves m64nTN
// fragments of TN / 2 floats each (d[4j + 2hh + e] = MMA row (warp%4)*16 + lane/4 + 8hh of the
// wave, token 8j + 2(lane%4) + e): gate waves first, then as many up waves. f0: the tile's
// first feature (a multiple of kGateRows); q: [m][inter] e4m3; sa: [inter/128][m_pad] f32
// (padding rows zeroed; needs m_pad <= TN). `scratch`: swiglu_scratch_floats() floats of
// shared memory.
template <int TN, int kGateRows>
__device__ __forceinline__ void swiglu_quant_epilogue(const float* acc, int f0, int m, int inter,
                                                      float* scratch, uint8_t* __restrict__ q,
                                                      float* __restrict__ sa) {
  static_assert(kGateRows == 32 || kGateRows == 64 || kGateRows == 128, "gate rows per CTA");
  constexpr int kAcc = TN / 2;
  constexpr int kGroupCtas = 128 / kGateRows;  // CTAs of one quantization group (the cluster)
  constexpr int kGW = kGateRows >= 64 ? kGateRows / 64 : 1;  // waves holding gate rows
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  const int r = warp * 16 + lane / 4;  // feature in the wave (and r + 8), for gate-holding warps
  const int c = (lane % 4) * 2;        // token in each n8 group (and c + 1)
  // Warps whose fragments hold gate rows (and so produce outputs).
  const bool producer = kGateRows >= 64 || warp < 2;

  float* warp_max = scratch;
  float* scale = scratch + 5 * TN;
  float up_v[kGW][kAcc];
  if constexpr (kGateRows == 32) {
    float* up_s = scratch + 6 * TN;  // [2 warps][kAcc][32 lanes]
    if (warp >= 2) {
#pragma unroll
      for (int x = 0; x < kAcc; ++x) up_s[((warp - 2) * kAcc + x) * 32 + lane] = acc[x];
    }
    ptx::named_barrier_sync(1, 128);
    if (warp < 2) {
#pragma unroll
      for (int x = 0; x < kAcc; ++x) up_v[0][x] = up_s[(warp * kAcc + x) * 32 + lane];
    }
  } else {
#pragma unroll
    for (int g = 0; g < kGW; ++g)
#pragma unroll
      for (int x = 0; x < kAcc; ++x) up_v[g][x] = acc[(kGW + g) * kAcc + x];
  }

  // h = bf16(silu(bf16 gate)) * bf16 up, rounded as the bf16 GEMM output would have been.
  float h[kGW][kAcc];
#pragma unroll
  for (int g = 0; g < kGW; ++g)
#pragma unroll
    for (int x = 0; x < kAcc; x += 2) {
      const float2 v = silu_mul_bf16x2(__floats2bfloat162_rn(acc[g * kAcc + x], acc[g * kAcc + x + 1]),
                                       __floats2bfloat162_rn(up_v[g][x], up_v[g][x + 1]));
      h[g][x] = producer ? v.x : 0.f;  // 0 is neutral for the amax below
      h[g][x + 1] = producer ? v.y : 0.f;
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
  uint32_t rank = 0;
  if constexpr (kGroupCtas == 1) {
    if (t < TN)
      scale[t] = act_scale(max_nan(max_nan(warp_max[t], warp_max[TN + t]),
                                   max_nan(warp_max[2 * TN + t], warp_max[3 * TN + t])));
  } else {
    float* cta_max = scratch + 4 * TN;
    if (t < TN)
      cta_max[t] = max_nan(max_nan(warp_max[t], warp_max[TN + t]),
                           max_nan(warp_max[2 * TN + t], warp_max[3 * TN + t]));
    ptx::cluster_sync();  // every CTA's amax published
    rank = ptx::cluster_ctarank();
    if (t < TN) {
      float a = cta_max[t];
#pragma unroll
      for (int p = 1; p < kGroupCtas; ++p)  // max is symmetric: every CTA of the group agrees
        a = max_nan(a, ptx::ld_shared_cluster_f32(ptx::map_shared_to_rank(cta_max + t, (rank + p) % kGroupCtas)));
      scale[t] = act_scale(a);
    }
  }
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
          if (producer && tok < m)
            q[static_cast<int64_t>(tok) * inter + f0 + 64 * g + r + 8 * hh] =
                quantize_e4m3(h[g][4 * j + 2 * hh + e], scale[tok]);
        }
  // The group's scales (rank 0 of the cluster), zeros in the padding rows m .. m_pad.
  const int m_pad = (m + 3) / 4 * 4;
  if (rank == 0 && t < m_pad) sa[static_cast<int64_t>(f0 / 128) * m_pad + t] = t < m ? scale[t] : 0.f;
  if constexpr (kGroupCtas > 1) ptx::cluster_sync();  // the peers are done reading cta_max
}

}  // namespace fp8gemm
