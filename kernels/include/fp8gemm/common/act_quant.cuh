// The arithmetic of the activation contract, shared by every kernel that produces a GEMM's
// (q, sa) operand: the quantizer (gemm/quant.cu), the fused elementwise kernels
// (fused/fused_quant.cu), the attention epilogue (attention/attention.cu) and the SwiGLU GEMM
// epilogue (epilogue/swiglu.cuh).
// One definition, so that every producer rounds exactly alike (bit-identical outputs are what
// the fused-vs-composed tests assert).
#pragma once
#include <cuda_bf16.h>
#include <cstdint>

#include "fp8gemm/ptx/cvt.cuh"

namespace fp8gemm {

constexpr float kE4M3Max = 448.f;
constexpr float kScaleEps = 1e-4f;

// max.NaN.f32: the larger operand, or NaN if either is NaN (so a NaN makes its group's scale NaN).
__device__ __forceinline__ float max_nan(float a, float b) {
  float d;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}

// The scale of a 128-wide group from its amax: s = max(amax, 1e-4) / 448 (IEEE division).
__device__ __forceinline__ float act_scale(float amax) {
  return ptx::div_rn(max_nan(amax, kScaleEps), kE4M3Max);
}

// One quantized value: cvt.rn.satfinite.e4m3(v / s).
__device__ __forceinline__ uint8_t quantize_e4m3(float v, float s) {
  return static_cast<uint8_t>(ptx::cvt_e4m3x2(ptx::div_rn(v, s), 0.f) & 0xff);
}

// Eight bf16 values (one 16-byte load) as floats, in order.
__device__ __forceinline__ void unpack_bf16x8(const uint4& raw, float (&f)[8]) {
  const __nv_bfloat162* h2 = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 v = __bfloat1622float2(h2[e]);
    f[2 * e] = v.x;
    f[2 * e + 1] = v.y;
  }
}

// One lane's 16-byte vector of a group: 8 bf16 or 4 f32 values as floats, zeros when !live.
template <typename T>
__device__ __forceinline__ void load_group_vec(const T* __restrict__ p, bool live, float (&v)[16 / sizeof(T)]) {
  constexpr int kVals = 16 / sizeof(T);
  if (live) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    if constexpr (sizeof(T) == 2) {
      unpack_bf16x8(raw, v);
    } else {
      const float* f = reinterpret_cast<const float*>(&raw);
#pragma unroll
      for (int i = 0; i < 4; ++i) v[i] = f[i];
    }
  } else {
#pragma unroll
    for (int i = 0; i < kVals; ++i) v[i] = 0.f;
  }
}

// The scale of a group held by kLanes adjacent lanes (kVals values each): the NaN-propagating
// amax (fmaxf would drop a NaN: a NaN input gives a NaN scale and NaN codes, as the CPU
// quantizer does, so a bad activation is never hidden) reduced over the lanes, then act_scale.
template <int kLanes, int kVals>
__device__ __forceinline__ float group_scale(const float (&v)[kVals]) {
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < kVals; ++i) amax = max_nan(amax, fabsf(v[i]));
#pragma unroll
  for (int o = kLanes / 2; o > 0; o /= 2) amax = max_nan(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  return act_scale(amax);
}

// The e4m3 codes of a lane's kVals (8 or 4) values at scale s, packed for one 8-byte (.x, .y)
// or 4-byte (.x) store (store_codes).
template <int kVals>
__device__ __forceinline__ uint2 pack_codes(const float (&v)[kVals], float s) {
  static_assert(kVals == 8 || kVals == 4, "a 16-byte vector of bf16 or f32");
  uint16_t packed[kVals / 2];
#pragma unroll
  for (int i = 0; i < kVals / 2; ++i) packed[i] = ptx::cvt_e4m3x2(ptx::div_rn(v[2 * i], s), ptx::div_rn(v[2 * i + 1], s));
  uint2 out;
  out.x = packed[0] | (uint32_t(packed[1]) << 16);
  if constexpr (kVals == 8) out.y = packed[2] | (uint32_t(packed[3]) << 16);
  else out.y = 0;
  return out;
}

// Stores pack_codes' result.
template <int kVals>
__device__ __forceinline__ void store_codes(uint8_t* q, uint2 c) {
  if constexpr (kVals == 8) *reinterpret_cast<uint2*>(q) = c;
  else *reinterpret_cast<uint32_t*>(q) = c.x;
}

// candle 0.11's bf16 `silu(gate) * up`: usilu_bf16 (f32 math, one rounding to bf16) then
// bmul_bf16 (__hmul2), for two adjacent elements.
__device__ __forceinline__ float2 silu_mul_bf16x2(__nv_bfloat162 gate, __nv_bfloat162 up) {
  __nv_bfloat162 s;
  {
    const float xf = __bfloat162float(gate.x);
    s.x = __float2bfloat16(xf / (1.0f + expf(-xf)));
  }
  {
    const float xf = __bfloat162float(gate.y);
    s.y = __float2bfloat16(xf / (1.0f + expf(-xf)));
  }
  return __bfloat1622float2(__hmul2(s, up));
}

// Zeroes the padding rows m .. round_up(m, 4) of a scale matrix sa [kb][round_up(m, 4)] (the
// GEMM's TMA reads them), entries first, first + step, ... of the pad * kb: every quantizing
// kernel does it itself, so no memset launch sits between it and the PDL-launched GEMM.
__device__ __forceinline__ void zero_scale_padding(float* sa, int64_t m, int64_t kb, int64_t first,
                                                   int64_t step) {
  const int64_t m_pad = (m + 3) / 4 * 4, pad = m_pad - m;
  for (int64_t i = first; i < pad * kb; i += step) sa[(i / pad) * m_pad + m + i % pad] = 0.f;
}

}  // namespace fp8gemm
