// The pieces of "residual add + RMSNorm + activation quantization" (fused/fused_quant.cu), each
// the bit-exact counterpart of the composed path's step (candle 0.11's bf16 `badd` and
// `rmsnorm`, then gemm/quant.cu). In a header so that any kernel that runs the norm shares one
// definition.
#pragma once
#include <cuda_bf16.h>
#include <cstdint>

#include "fp8gemm/common/act_quant.cuh"
#include "fp8gemm/ptx/tma.cuh"
#include "fp8gemm/common/trace.cuh"

namespace fp8gemm {

// Quantizes one 128-wide group spread over 16 lanes (8 consecutive values each, lane `sub`
// holds columns sub*8 .. sub*8+7) exactly as gemm/quant.cu does. All 32 lanes of the warp must
// call it (the amax shuffles stay inside each 16-lane half); lanes of an invalid group pass
// zeros and store nothing. `q` points at the lane's 8 output bytes, `sa_slot` at the group's
// scale (global or shared memory).
__device__ __forceinline__ void quantize_group(const float (&v)[8], bool valid, int sub,
                                               uint8_t* q, float* sa_slot) {
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = max_nan(amax, fabsf(v[i]));
#pragma unroll
  for (int o = 8; o > 0; o /= 2) amax = max_nan(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float s = act_scale(amax);
  if (valid) {
    uint16_t packed[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      packed[i] = ptx::cvt_e4m3x2(ptx::div_rn(v[2 * i], s), ptx::div_rn(v[2 * i + 1], s));
    uint2 out;
    out.x = packed[0] | (uint32_t(packed[1]) << 16);
    out.y = packed[2] | (uint32_t(packed[3]) << 16);
    *reinterpret_cast<uint2*>(q) = out;
    if (sub == 0) *sa_slot = s;
  }
}

// Eight bf16 values of a split-K GEMM output that was left unreduced: its f32 partials
// [splits][count] at element `i` (a multiple of 8), added in split order and rounded once —
// splitk_reduce_kernel's result (epilogue/splitk_reduce.cuh), bit for bit. The first four
// splits' loads are issued together (one L2 round trip instead of four: decode at batch 1
// measured 0.08 ms faster); the adds keep split order.
__device__ __forceinline__ uint4 reduce_partials8(const float* __restrict__ p, int splits,
                                                  int64_t count, int64_t i) {
  constexpr int kBatch = 4;
  float4 l[kBatch], h[kBatch];
#pragma unroll
  for (int s = 0; s < kBatch; ++s) {
    // Splits past `splits` re-read split 0 (in bounds, unused): no predicated-off registers.
    const float* q = p + (s < splits ? s : 0) * count + i;
    l[s] = *reinterpret_cast<const float4*>(q);
    h[s] = *reinterpret_cast<const float4*>(q + 4);
  }
  float4 lo = l[0], hi = h[0];
#pragma unroll
  for (int s = 1; s < kBatch; ++s) {
    if (s < splits) {
      lo.x += l[s].x, lo.y += l[s].y, lo.z += l[s].z, lo.w += l[s].w;
      hi.x += h[s].x, hi.y += h[s].y, hi.z += h[s].z, hi.w += h[s].w;
    }
  }
  for (int s = kBatch; s < splits; ++s) {
    const float4 a = *reinterpret_cast<const float4*>(p + s * count + i);
    const float4 b = *reinterpret_cast<const float4*>(p + s * count + i + 4);
    lo.x += a.x, lo.y += a.y, lo.z += a.z, lo.w += a.w;
    hi.x += b.x, hi.y += b.y, hi.z += b.z, hi.w += b.w;
  }
  __nv_bfloat162 r[4] = {__floats2bfloat162_rn(lo.x, lo.y), __floats2bfloat162_rn(lo.z, lo.w),
                         __floats2bfloat162_rn(hi.x, hi.y), __floats2bfloat162_rn(hi.z, hi.w)};
  return *reinterpret_cast<const uint4*>(r);
}

// h = x + b on eight bf16 values: __hadd2 on bf16x2 is what candle's vectorized badd_bf16 runs.
__device__ __forceinline__ uint4 add_bf16x8(uint4 x, const uint4& b) {
  __nv_bfloat162* x2 = reinterpret_cast<__nv_bfloat162*>(&x);
  const __nv_bfloat162* b2 = reinterpret_cast<const __nv_bfloat162*>(&b);
#pragma unroll
  for (int j = 0; j < 4; ++j) x2[j] = __hadd2(x2[j], b2[j]);
  return x;
}

// Eight values of h = x (+ residual) at element i (a multiple of 8) of an [m, ncols] bf16 matrix
// of `count` elements, given x's eight values `a` (the norms load them before or after their
// PDL wait): the residual is bf16 `residual`, the f32 split-K partials `rpart` ([splits][count]),
// or absent (both null); with one, the sum is also stored to x_sum.
__device__ __forceinline__ uint4 add_h8(uint4 a, const __nv_bfloat16* __restrict__ residual,
                                        const float* __restrict__ rpart, int splits, int64_t count,
                                        int64_t i, __nv_bfloat16* __restrict__ x_sum) {
  if (residual != nullptr || rpart != nullptr) {
    const uint4 b = rpart != nullptr ? reduce_partials8(rpart, splits, count, i)
                                     : *reinterpret_cast<const uint4*>(residual + i);
    a = add_bf16x8(a, b);
    *reinterpret_cast<uint4*>(x_sum + i) = a;
  }
  return a;
}

// One CTA's share of a norm row into shared memory around the PDL wait: vector v (8 values)
// of the CTA is element `col_of(v)` of the row at `base`. gamma (a model constant) and a
// settled x (the residual stream written several launches back: its HBM round trip would
// otherwise queue behind the next GEMM's ring fill) are staged before griddepcontrol.wait;
// the fresh residual or split-K partials are added after it (add_h8), into h_s. `t_wait`: where
// thread 0 stamps the end of the wait in a -DFP8GEMM_TRACE build (common/trace.cuh).
template <int kThreads, class ColOf>
__device__ __forceinline__ void stage_norm_row(ColOf col_of, int nvec, int64_t base,
                                               const __nv_bfloat16* __restrict__ x,
                                               const __nv_bfloat16* __restrict__ gamma,
                                               const __nv_bfloat16* __restrict__ residual,
                                               const float* __restrict__ rpart, int splits,
                                               int64_t count, bool x_settled,
                                               __nv_bfloat16* __restrict__ x_sum,
                                               __nv_bfloat16* h_s, __nv_bfloat16* g_s,
                                               unsigned long long* t_wait = nullptr) {
  const int tid = threadIdx.x;
  for (int v = tid; v < nvec; v += kThreads)
    reinterpret_cast<uint4*>(g_s)[v] = reinterpret_cast<const uint4*>(gamma)[col_of(v) / 8];
  if (x_settled)
    for (int v = tid; v < nvec; v += kThreads)
      reinterpret_cast<uint4*>(h_s)[v] = *reinterpret_cast<const uint4*>(x + base + col_of(v));
  ptx::griddep_wait();  // our inputs; the previous grid done reading
#ifdef FP8GEMM_TRACE
  if (t_wait != nullptr && tid == 0) *t_wait = ptx::globaltimer_ns();
#endif
  // Each thread re-reads only the vectors it staged itself.
  for (int v = tid; v < nvec; v += kThreads) {
    const int64_t i = base + col_of(v);
    const uint4 a = x_settled ? reinterpret_cast<const uint4*>(h_s)[v] : *reinterpret_cast<const uint4*>(x + i);
    reinterpret_cast<uint4*>(h_s)[v] = add_h8(a, residual, rpart, splits, count, i, x_sum);
  }
}

// candle's warp reduction in rmsnorm: a butterfly over the 32 lanes, masks 16, 8, 4, 2, 1.
__device__ __forceinline__ float warp_sum_xor(float v) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) v += __shfl_xor_sync(0xffffffff, v, mask, 32);
  return v;
}

// candle's rmsnorm scale from the row's sum of squares.
__device__ __forceinline__ float rms_of(float total, int ncols, float eps) {
  const float mean = total / ncols;
  return rsqrtf(mean + eps);
}

// rsqrt(mean(h^2) + eps) of the row h_s[0 .. ncols) (shared memory), in the reduction order of
// candle's rmsnorm with a block of kVirtual threads (32, or 1024 with a 32-slot cross-warp sum),
// run by the kReal threads of this block (blockDim.x == kReal, fewer than kVirtual allowed):
// real thread t plays virtual threads t + kReal * i, so virtual warp w + (kReal / 32) * i is real
// warp w's i-th value and every butterfly adds the same values in the same order (bit-exact:
// tests/gpu_fused.rs compares with candle's kernel). `s_sum`: 32 floats of
// shared memory. Contains a __syncthreads (kVirtual > 32): every thread of the block must call it.
template <int kVirtual, int kReal>
__device__ __forceinline__ float rms_scale(const __nv_bfloat16* h_s, int ncols, float eps,
                                           float* s_sum) {
  static_assert(kVirtual == 32 || kVirtual == 1024, "candle's rmsnorm block sizes");
  static_assert(kReal % 32 == 0 && kVirtual % kReal == 0, "whole warps, whole virtual blocks");
  constexpr int kPer = kVirtual / kReal;
  const int tid = threadIdx.x;
  float tmp[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    tmp[i] = 0.0f;
    for (int col = tid + kReal * i; col < ncols; col += kVirtual) {
      const float xi = static_cast<float>(h_s[col]);
      tmp[i] += xi * xi;  // contracted to fma.rn.f32 exactly as in candle's build
    }
    tmp[i] = warp_sum_xor(tmp[i]);
  }
  float total = tmp[0];
  if constexpr (kVirtual > 32) {
    const int warp = tid / 32, lane = tid % 32;
    if (lane == 0) {
#pragma unroll
      for (int i = 0; i < kPer; ++i) s_sum[warp + (kReal / 32) * i] = tmp[i];
    }
    __syncthreads();
    total = warp_sum_xor(s_sum[lane]);  // kVirtual == 1024: all 32 slots are written
  }
  return rms_of(total, ncols, eps);
}

// Eight normalized values bf16(scale * h * gamma), as floats (candle's rmsnorm output, read
// back by the quantizer).
__device__ __forceinline__ void rmsnorm8(float scale, const uint4& h, const uint4& g, float (&v)[8]) {
  const __nv_bfloat16* hp = reinterpret_cast<const __nv_bfloat16*>(&h);
  const __nv_bfloat16* gp = reinterpret_cast<const __nv_bfloat16*>(&g);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float a = static_cast<float>(gp[i]);
    const __nv_bfloat16 y = static_cast<__nv_bfloat16>(scale * static_cast<float>(hp[i]) * a);
    v[i] = __bfloat162float(y);
  }
}

}  // namespace fp8gemm
