// Compiled configurations of the persistent schedule (kind FP8GEMM_KIND_PERSISTENT).
#include "fp8gemm/launch.cuh"
#include "fp8gemm/schedules/persistent.cuh"

namespace fp8gemm {

const ConfigEntry* persistent_configs(int* count) {
  static const ConfigEntry kConfigs[] = {
      {FP8GEMM_KIND_PERSISTENT, 128, 128, 6, false, &run_sm90_fp8_gemm<Persistent<1, 128, 6>>, false},
      {FP8GEMM_KIND_PERSISTENT, 256, 128, 4, false, &run_sm90_fp8_gemm<Persistent<2, 128, 4>>, false},
      // 3 math warpgroups, one 64-row wave each (192 x 128 tile, 160 registers per math thread)
      {FP8GEMM_KIND_PERSISTENT, 192, 128, 5, false, &run_sm90_fp8_gemm<Persistent<1, 128, 5, 1, 3>>, false},
  };
  *count = sizeof(kConfigs) / sizeof(kConfigs[0]);
  return kConfigs;
}

}  // namespace fp8gemm
