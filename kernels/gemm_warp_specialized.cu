// Compiled configurations of the warp-specialized schedule (kind FP8GEMM_KIND_WARP_SPEC).
#include "fp8gemm/launch.cuh"
#include "fp8gemm/schedules/warp_specialized.cuh"

namespace fp8gemm {

const ConfigEntry* warp_specialized_configs(int* count) {
  static const ConfigEntry kConfigs[] = {
      {FP8GEMM_KIND_WARP_SPEC, 128, 64, 8, true, &run_sm90_fp8_gemm<WarpSpecialized<64, 8>>, true},
      // K block i+1's wgmma overlap K block i's promotion (mainloop_xpromote.cuh): 128x10240x5120
      // 21.4 vs 21.6 us hot, 256x4096^2 at split 2 13.0 vs 13.7 (docs/perf/2026-12-02-s22/call1/).
      {FP8GEMM_KIND_WARP_SPEC, 128, 128, 6, true, &run_sm90_fp8_gemm<WarpSpecialized<128, 6, 1, true>>, true},
      // Without the overlap (stages + 100: a development key for A/Bs, never dispatched;
      // bench --dev-variant, tests/gpu_reliability.rs dev_variants_match_reference).
      {FP8GEMM_KIND_WARP_SPEC, 128, 128, 106, true, &run_sm90_fp8_gemm<WarpSpecialized<128, 6>>, true},
  };
  *count = sizeof(kConfigs) / sizeof(kConfigs[0]);
  return kConfigs;
}

}  // namespace fp8gemm

// Timeline trace reader of this translation unit (builds with -DFP8GEMM_TRACE only).
FP8GEMM_TRACE_READER(fp8gemm_trace_read_warp_specialized)
// Per-stage probe reader of this translation unit (builds with -DFP8GEMM_TRACE_STAGES only).
FP8GEMM_STAGE_READER(fp8gemm_stage_read_warp_specialized)
