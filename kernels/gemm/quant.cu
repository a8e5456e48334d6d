// Activation quantization (per token, per 128-wide K group: the GEMM's (q, sa) operand) and
// weight dequantization to bf16 (the dequant provider on Hopper).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "api.h"
#include "fp8gemm/common/act_quant.cuh"
#include "fp8gemm/common/trace.cuh"

namespace fp8gemm {

// One group = one row x 128 columns. kLanes lanes per group, each loading 16 bytes:
// bf16 -> 8 values (16 lanes/group, 2 groups per warp); f32 -> 4 values (32 lanes/group).
// s = max(amax, 1e-4) / 448 ; q = cvt.rn.satfinite.e4m3(x / s) with IEEE division.
// kRagged (k % 128 != 0, k % 8 == 0): the last group of a row is partial; its lanes past k load
// nothing (zeros, which never raise the amax) and store nothing, and its scale is written as
// usual. k % 128 == 0 runs the kRagged = false instance, the code without those predicates.
template <typename T, bool kRagged>
__global__ void __launch_bounds__(256) quantize_act_kernel(const T* __restrict__ x,
                                                           uint8_t* __restrict__ q,
                                                           float* __restrict__ sa, int64_t m,
                                                           int64_t k) {
  FP8GEMM_TRACE_BEGIN(FP8GEMM_TRACE_QUANT);
  // Let a PDL-launched GEMM start now: it prefetches its weights while we run and waits
  // (griddepcontrol.wait) for our completion before it reads q / sa.
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  constexpr int kVals = 16 / sizeof(T);
  constexpr int kLanes = 128 / kVals;
  constexpr int kGroupsPerWarp = 32 / kLanes;
  const int64_t kb = kRagged ? (k + 127) / 128 : k / 128;
  const int64_t groups = m * kb;
  const int64_t m_pad = (m + 3) / 4 * 4;
  const int lane = threadIdx.x % 32;
  const int sub = lane % kLanes;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t wid = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; wid * kGroupsPerWarp < groups;
       wid += warps) {
    const int64_t g = wid * kGroupsPerWarp + lane / kLanes;
    const bool valid = g < groups;
    const int64_t row = valid ? g / kb : 0, col_blk = valid ? g % kb : 0;
    const int64_t off = row * k + col_blk * 128 + sub * kVals;
    // This lane's vector is inside the row (k % kVals == 0: a vector is all in or all out).
    // Lane 0 of a valid group always is: it writes the scale.
    const bool live = kRagged ? valid && col_blk * 128 + sub * kVals < k : valid;
    float v[kVals];
    load_group_vec(x + off, live, v);
    const float s = group_scale<kLanes>(v);
    if (live) {
      store_codes<kVals>(q + off, pack_codes(v, s));
      if (sub == 0) sa[col_blk * m_pad + row] = s;
    }
  }
  zero_scale_padding(sa, m, kb, int64_t(blockIdx.x) * blockDim.x + threadIdx.x,
                     int64_t(gridDim.x) * blockDim.x);
  FP8GEMM_TRACE_END();
}

// out[r][c] = bf16(e4m3(w[r][c]) * sw[r/128][c/128]); 8 values per thread when k % 8 == 0.
template <bool kVec>
__global__ void __launch_bounds__(256) dequant_weight_kernel(const uint8_t* __restrict__ w,
                                                             const float* __restrict__ sw,
                                                             __nv_bfloat16* __restrict__ out,
                                                             int64_t n, int64_t k) {
  const int64_t kb = (k + 127) / 128;
  const int64_t total = n * k;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  if constexpr (kVec) {
    for (int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 8; i < total; i += stride * 8) {
      const int64_t r = i / k, c = i % k;
      const float s = sw[(r / 128) * kb + c / 128];
      const uint2 raw = *reinterpret_cast<const uint2*>(w + i);
      const uint16_t* p = reinterpret_cast<const uint16_t*>(&raw);
      __nv_bfloat162 o[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t h2 = ptx::cvt_e4m3x2_to_f16x2(p[j]);
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h2));
        o[j] = __floats2bfloat162_rn(f.x * s, f.y * s);
      }
      *reinterpret_cast<uint4*>(out + i) = *reinterpret_cast<const uint4*>(o);
    }
  } else {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
      const int64_t r = i / k, c = i % k;
      const float s = sw[(r / 128) * kb + c / 128];
      const uint32_t h2 = ptx::cvt_e4m3x2_to_f16x2(w[i]);
      const float f = __half2float(*reinterpret_cast<const __half*>(&h2));
      out[i] = __float2bfloat16_rn(f * s);
    }
  }
}

}  // namespace fp8gemm

// Timeline trace reader of this translation unit (builds with -DFP8GEMM_TRACE only).
FP8GEMM_TRACE_READER(fp8gemm_trace_read_quant)

using namespace fp8gemm;

static int grid_for(int64_t work_items, int per_block) {
  int64_t b = (work_items + per_block - 1) / per_block;
  if (b < 1) b = 1;
  if (b > 132 * 32) b = 132 * 32;
  return static_cast<int>(b);
}

extern "C" int32_t fp8gemm_quantize_act(const void* x, int32_t x_dtype, uint8_t* q, float* sa,
                                        int64_t m, int64_t k, void* stream) {
  // k % 8: whole 16-byte vectors of x (bf16 or f32) per row, 8-byte aligned rows of q.
  if (m < 1 || k < 8 || k % 8 != 0) return FP8GEMM_ERR_SHAPE;
  if (x_dtype != FP8GEMM_BF16 && x_dtype != FP8GEMM_F32) return FP8GEMM_ERR_DTYPE;
  if (!x || !q || !sa) return FP8GEMM_ERR_ALIGN;
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(q) |
       reinterpret_cast<uintptr_t>(sa)) & 15)
    return FP8GEMM_ERR_ALIGN;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int64_t groups = m * ((k + 127) / 128);
  const bool ragged = k % 128 != 0;  // a partial last group per row
  if (x_dtype == FP8GEMM_BF16) {
    const auto* xb = static_cast<const __nv_bfloat16*>(x);
    if (ragged)
      quantize_act_kernel<__nv_bfloat16, true><<<grid_for(groups, 16), 256, 0, s>>>(xb, q, sa, m, k);
    else
      quantize_act_kernel<__nv_bfloat16, false><<<grid_for(groups, 16), 256, 0, s>>>(xb, q, sa, m, k);
  } else {
    const auto* xf = static_cast<const float*>(x);
    if (ragged)
      quantize_act_kernel<float, true><<<grid_for(groups, 8), 256, 0, s>>>(xf, q, sa, m, k);
    else
      quantize_act_kernel<float, false><<<grid_for(groups, 8), 256, 0, s>>>(xf, q, sa, m, k);
  }
  return cudaGetLastError() == cudaSuccess ? FP8GEMM_OK : FP8GEMM_ERR_LAUNCH;
}

extern "C" int32_t fp8gemm_dequant_weight(const uint8_t* w, const float* sw, void* out, int64_t n,
                                          int64_t k, void* stream) {
  if (n < 1 || k < 1) return FP8GEMM_ERR_SHAPE;
  if (!w || !sw || !out) return FP8GEMM_ERR_ALIGN;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool vec = k % 8 == 0 && ((reinterpret_cast<uintptr_t>(w) & 7) == 0) &&
                   ((reinterpret_cast<uintptr_t>(out) & 15) == 0);
  if (vec)
    dequant_weight_kernel<true><<<grid_for(n * k / 8, 256), 256, 0, s>>>(
        w, sw, static_cast<__nv_bfloat16*>(out), n, k);
  else
    dequant_weight_kernel<false><<<grid_for(n * k, 256), 256, 0, s>>>(
        w, sw, static_cast<__nv_bfloat16*>(out), n, k);
  return cudaGetLastError() == cudaSuccess ? FP8GEMM_OK : FP8GEMM_ERR_LAUNCH;
}
