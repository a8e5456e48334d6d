// Compiled configurations of the small-M schedule (kind FP8GEMM_KIND_SMALL_M, impls/small_m.cuh):
// block_m = 64 tokens, block_n = kTileN output columns per tile.
#include "fp8gemm/impls/launch.cuh"
#include "fp8gemm/impls/small_m.cuh"

namespace fp8gemm {

// 64 x 64, 8 stages: the overlapped loop (K block i+1's wgmma while K block i is promoted), one
// TMA issuer (two measured within the noise on this tile).
struct SmallM64x64S8 {
  static constexpr int kTileN = 64, kStages = 8, kIssuers = 1;
  static constexpr bool kHalves = false, kXPromote = true;
};

// 64 x 128, 8 stages: the overlapped loop at split 1-2 (the ring, not the consumer, sets the
// pace of long K loops: 8 stages measured faster than 6; 10 and 12 did not help). Two TMA
// issuer threads load alternate stages (measured faster on 64 x 128 tiles).
struct SmallM64x128S8 {
  static constexpr int kTileN = 128, kStages = 8, kIssuers = 2;
  static constexpr bool kHalves = false, kXPromote = true;
};

// 64 x 128, 6 stages: workspace splits (>= 3; 8 stages measured slower there). A split's K range
// of <= 32 K blocks takes the N-halves loop (one half promoted while the other's wgmma runs),
// a longer one the overlapped loop: each measured faster on those shapes (docs/perf.md).
struct SmallM64x128S6Halves {
  static constexpr int kTileN = 128, kStages = 6, kIssuers = 2;
  static constexpr bool kHalves = true, kXPromote = false;
};
struct SmallM64x128S6Overlapped {
  static constexpr int kTileN = 128, kStages = 6, kIssuers = 2;
  static constexpr bool kHalves = false, kXPromote = true;
};

// The 64 x 128 tile on 6 stages: the N-halves loop for workspace splits of <= 32 K blocks, the
// overlapped loop otherwise.
int run_small_m_128x6(const GemmArgs& a) {
  const int kb_per_split = ((a.k + kBlockK - 1) / kBlockK + a.split - 1) / a.split;
  if (a.split >= 3 && kb_per_split <= 32) return run_sm90_fp8_gemm<SmallM<SmallM64x128S6Halves>>(a);
  return run_sm90_fp8_gemm<SmallM<SmallM64x128S6Overlapped>>(a);
}

const ConfigEntry* small_m_configs(int* count) {
  static const ConfigEntry kConfigs[] = {
      {FP8GEMM_KIND_SMALL_M, 64, 64, 8, true, &run_sm90_fp8_gemm<SmallM<SmallM64x64S8>>, true},
      {FP8GEMM_KIND_SMALL_M, 64, 128, 8, true, &run_sm90_fp8_gemm<SmallM<SmallM64x128S8>>, true},
      {FP8GEMM_KIND_SMALL_M, 64, 128, 6, true, &run_small_m_128x6, true},
  };
  *count = sizeof(kConfigs) / sizeof(kConfigs[0]);
  return kConfigs;
}

}  // namespace fp8gemm

// Timeline trace reader of this translation unit (builds with -DFP8GEMM_TRACE only).
FP8GEMM_TRACE_READER(fp8gemm_trace_read_small_m)
// Per-stage probe reader of this translation unit (builds with -DFP8GEMM_TRACE_STAGES only).
FP8GEMM_STAGE_READER(fp8gemm_stage_read_small_m)
