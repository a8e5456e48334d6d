// Compiled configurations of the small-M schedule (kind FP8GEMM_KIND_SMALL_M).
#include "fp8gemm/launch.cuh"
#include "fp8gemm/schedules/small_m.cuh"

namespace fp8gemm {

const ConfigEntry* small_m_configs(int* count) {
  static const ConfigEntry kConfigs[] = {
      {FP8GEMM_KIND_SMALL_M, 64, 32, 8, true, &run_sm90_fp8_gemm<SmallM<32, 8>>, true},
      {FP8GEMM_KIND_SMALL_M, 64, 64, 8, true, &run_sm90_fp8_gemm<SmallM<64, 8>>, true},
      {FP8GEMM_KIND_SMALL_M, 64, 128, 6, true, &run_sm90_fp8_gemm<SmallM<128, 6>>, true},
  };
  *count = sizeof(kConfigs) / sizeof(kConfigs[0]);
  return kConfigs;
}

}  // namespace fp8gemm
