// Compiled configurations of the persistent schedule (kind FP8GEMM_KIND_PERSISTENT).
#include "fp8gemm/launch.cuh"
#include "fp8gemm/schedules/persistent.cuh"

namespace fp8gemm {

const ConfigEntry* persistent_configs(int* count) {
  static const ConfigEntry kConfigs[] = {
      {FP8GEMM_KIND_PERSISTENT, 128, 128, 6, false, &run_sm90_fp8_gemm<Persistent<1, 128, 6>>},
      {FP8GEMM_KIND_PERSISTENT, 256, 128, 4, false, &run_sm90_fp8_gemm<Persistent<2, 128, 4>>},
      // dev A/B: block_m + 1000 = 2-CTA cluster with activation multicast
      {FP8GEMM_KIND_PERSISTENT, 1128, 128, 6, false, &run_sm90_fp8_gemm<Persistent<1, 128, 6, 2>>},
      {FP8GEMM_KIND_PERSISTENT, 1256, 128, 4, false, &run_sm90_fp8_gemm<Persistent<2, 128, 4, 2>>},
  };
  *count = sizeof(kConfigs) / sizeof(kConfigs[0]);
  return kConfigs;
}

}  // namespace fp8gemm
