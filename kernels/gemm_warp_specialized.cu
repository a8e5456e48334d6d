// Compiled configurations of the warp-specialized schedule (kind FP8GEMM_KIND_WARP_SPEC).
#include "fp8gemm/launch.cuh"
#include "fp8gemm/schedules/warp_specialized.cuh"

namespace fp8gemm {

const ConfigEntry* warp_specialized_configs(int* count) {
  static const ConfigEntry kConfigs[] = {
      config_entry<WarpSpecialized<64, 8>>(FP8GEMM_KIND_WARP_SPEC, 128, 64, 8, true),
      config_entry<WarpSpecialized<128, 6>>(FP8GEMM_KIND_WARP_SPEC, 128, 128, 6, true),
  };
  *count = sizeof(kConfigs) / sizeof(kConfigs[0]);
  return kConfigs;
}

}  // namespace fp8gemm
