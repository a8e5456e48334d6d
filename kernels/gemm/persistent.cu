// Compiled configurations of the persistent schedule (kind FP8GEMM_KIND_PERSISTENT,
// impls/persistent.cuh). split_k = S > 1: the tiles of a partial last round run as S K ranges
// each (split tail, scheduler/tail_fixup.cuh). Both stage the output tile in shared memory for
// TMA stores (measured faster than direct stores despite one ring stage fewer). The dispatcher
// picks by waves (tiles vs SMs).
#include "fp8gemm/impls/launch.cuh"
#include "fp8gemm/impls/persistent.cuh"

namespace fp8gemm {

// 256 x 128, 3 stages: the next tile's weight scales are not prefetched (measured -2 to +7 %
// with), one TMA issuer (two measured 2-5 % slower on this tile).
struct Persistent256x128S3 {
  static constexpr int kTileM = 256, kTileN = 128, kStages = 3, kIssuers = 1;
  static constexpr bool kPrefetchScales = false, kXPromote = false;
};
// 128 x 128, 5 stages: the next tile's scales prefetched (3-8 % faster), two TMA issuer threads
// (alternate stages) and K block i+1's wgmma overlapping K block i's promotion (608 -> 416 ns
// per K block); each measured faster on the large-M shapes (docs/perf.md).
struct Persistent128x128S5 {
  static constexpr int kTileM = 128, kTileN = 128, kStages = 5, kIssuers = 2;
  static constexpr bool kPrefetchScales = true, kXPromote = true;
};

const ConfigEntry* persistent_configs(int* count) {
  static const ConfigEntry kConfigs[] = {
      {FP8GEMM_KIND_PERSISTENT, 256, 128, 3, true, &run_sm90_fp8_gemm<Persistent<Persistent256x128S3>>, false},
      {FP8GEMM_KIND_PERSISTENT, 128, 128, 5, true, &run_sm90_fp8_gemm<Persistent<Persistent128x128S5>>, false},
  };
  *count = sizeof(kConfigs) / sizeof(kConfigs[0]);
  return kConfigs;
}

}  // namespace fp8gemm

// Timeline trace reader of this translation unit (builds with -DFP8GEMM_TRACE only).
FP8GEMM_TRACE_READER(fp8gemm_trace_read_persistent)
// Per-stage probe reader of this translation unit (builds with -DFP8GEMM_TRACE_STAGES only).
FP8GEMM_STAGE_READER(fp8gemm_stage_read_persistent)
