// Compiled configurations of the persistent schedule (kind FP8GEMM_KIND_PERSISTENT).
#include "fp8gemm/launch.cuh"
#include "fp8gemm/schedules/persistent.cuh"

namespace fp8gemm {

const ConfigEntry* persistent_configs(int* count) {
  static const ConfigEntry kConfigs[] = {
      // Both stage the output tile in shared memory for TMA stores (one ring stage fewer than
      // the direct-store versions, which they replaced: 2048x4096^2 65 vs 73 us, 4096^3 132 vs
      // 153; docs/PERF.md session 7). The dispatcher picks by waves (tiles vs SMs).
      {FP8GEMM_KIND_PERSISTENT, 256, 128, 3, false, &run_sm90_fp8_gemm<Persistent<2, 128, 3, 1, 2, true>>, false},
      {FP8GEMM_KIND_PERSISTENT, 128, 128, 5, false, &run_sm90_fp8_gemm<Persistent<1, 128, 5, 1, 2, true, true>>, false},
  };
  *count = sizeof(kConfigs) / sizeof(kConfigs[0]);
  return kConfigs;
}

}  // namespace fp8gemm

// Timeline trace reader of this translation unit (builds with -DFP8GEMM_TRACE only).
FP8GEMM_TRACE_READER(fp8gemm_trace_read_persistent)
