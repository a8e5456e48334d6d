// The arithmetic of the activation contract, shared by every kernel that produces a GEMM's
// (q, sa) operand: the quantizer (quant.cu), the fused elementwise kernels (fused_quant.cu),
// the attention epilogue (attention.cu) and the SwiGLU GEMM epilogue (sm90_fp8_gemm_1d2d.cuh).
// One definition, so that every producer rounds exactly alike (bit-identical outputs are what
// the fused-vs-composed tests assert).
#pragma once
#include <cuda_bf16.h>
#include <cstdint>

#include "ptx/cvt.cuh"

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

// The e4m3 codes of (v0 / s, v1 / s) exactly as cvt.rn.satfinite(div_rn(v, s)) gives them, from
// the approximate quotients v * rs (rs ~ 1 / s): RN(v / s) lies within 2^-22 (relative) of v * rs,
// and rounding to e4m3 is monotonic, so when both ends of v * rs * (1 -+ 2^-19) round to the same
// codes, so does RN(v / s). Otherwise (a quotient at an e4m3 rounding midpoint: ~0.35 % of bf16
// values, whose 8-bit significands often divide to exact ties; so ~half of the 256-value warp
// passes take this branch) or for a non-finite scale, the exact divisions. CPU check of the
// claim: format.rs, fast_quotient_codes_equal_the_divided_ones. Used by the in-kernel quantizer
// (quant_operand.cuh), where eight IEEE divisions per pass (each a branchy sequence, issued one
// after another) were its bottleneck: 1 x 51200 x 5120 in 109 us, 85 with this (session 19).
__device__ __forceinline__ uint16_t quantize_pair(float v0, float v1, float s, float rs) {
  constexpr float kLo = 1.f - 0x1p-19f, kHi = 1.f + 0x1p-19f;
  const float q0 = v0 * rs, q1 = v1 * rs;
  const uint16_t lo = ptx::cvt_e4m3x2(q0 * kLo, q1 * kLo);
  const uint16_t hi = ptx::cvt_e4m3x2(q0 * kHi, q1 * kHi);
  if (lo == hi && s < INFINITY) return lo;  // (NaN scales fail the comparison)
  return ptx::cvt_e4m3x2(ptx::div_rn(v0, s), ptx::div_rn(v1, s));
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
