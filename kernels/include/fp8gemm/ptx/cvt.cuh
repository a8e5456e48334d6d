// Numeric conversions used by the quant/dequant kernels.
#pragma once
#include <cstdint>

namespace fp8gemm::ptx {

// Two f32 -> two e4m3 (round to nearest even, saturate to +-448). `lo` lands in the low byte.
__device__ __forceinline__ uint16_t cvt_e4m3x2(float lo, float hi) {
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

// Two e4m3 (low byte first) -> two f16 packed (exact).
__device__ __forceinline__ uint32_t cvt_e4m3x2_to_f16x2(uint16_t v) {
  uint32_t r;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(v));
  return r;
}

// IEEE round-to-nearest division (never the approximate one, whatever the flags).
__device__ __forceinline__ float div_rn(float a, float b) { return __fdiv_rn(a, b); }

}  // namespace fp8gemm::ptx
