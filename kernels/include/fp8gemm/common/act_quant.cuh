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
