// Compiled configuration of the warp-specialized schedule (kind FP8GEMM_KIND_WARP_SPEC,
// impls/warp_specialized.cuh): 128 x kTileN tiles, two math warpgroups.
#include "fp8gemm/impls/launch.cuh"
#include "fp8gemm/impls/warp_specialized.cuh"

namespace fp8gemm {

// 128 x 128, 6 stages, the promotion overlapped across K blocks (measured faster than without:
// 128x10240x5120, 256x4096^2 at split 2).
struct WarpSpec128x128S6 {
  static constexpr int kTileN = 128, kStages = 6;
};

const ConfigEntry* warp_specialized_configs(int* count) {
  static const ConfigEntry kConfigs[] = {
      {FP8GEMM_KIND_WARP_SPEC, 128, 128, 6, true, &run_sm90_fp8_gemm<WarpSpecialized<WarpSpec128x128S6>>, true},
  };
  *count = sizeof(kConfigs) / sizeof(kConfigs[0]);
  return kConfigs;
}

}  // namespace fp8gemm

// Timeline trace reader of this translation unit (builds with -DFP8GEMM_TRACE only).
FP8GEMM_TRACE_READER(fp8gemm_trace_read_warp_specialized)
// Per-stage probe reader of this translation unit (builds with -DFP8GEMM_TRACE_STAGES only).
FP8GEMM_STAGE_READER(fp8gemm_stage_read_warp_specialized)
