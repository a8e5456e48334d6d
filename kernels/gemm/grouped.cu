// Compiled configurations of the grouped (mixture-of-experts) schedules (impls/grouped.cuh):
// fp8gemm_grouped_gemm (gemm/gemm.cu), tokens per tile by the most tokens an expert may have
// (8-64: swap-AB; 128: tokens on M, prefill sizes), and fp8gemm_grouped_gemm_swiglu_quant, the
// gated gate/up tile.
#include "fp8gemm/impls/grouped.cuh"

namespace fp8gemm {

// 8 tokens (1-8 per expert): ~74 KB, three CTAs per SM (the dense decode tile).
struct Grouped8x64S8 {
  static constexpr int kTokens = 8, kStages = 8;
  static constexpr bool kHalves = false, kGated = false;
};
// 16 tokens: one full-width m64n16 wgmma per K block (as the dense 16-token tile).
struct Grouped16x64S8 {
  static constexpr int kTokens = 16, kStages = 8;
  static constexpr bool kHalves = false, kGated = false;
};
// 32 tokens: two N halves, one promoted while the other's wgmma runs.
struct Grouped32x64S8 {
  static constexpr int kTokens = 32, kStages = 8;
  static constexpr bool kHalves = true, kGated = false;
};
// 64 tokens (more per expert: several token tiles): two halves, 6 stages (~99 KB, two CTAs per
// SM).
struct Grouped64x64S6 {
  static constexpr int kTokens = 64, kStages = 6;
  static constexpr bool kHalves = true, kGated = false;
};

// Tokens on M (more than 64 tokens per expert): the dense 128 x 128 persistent tile's
// configuration (gemm/persistent.cu: scale prefetch, two TMA issuers, overlapped promotion).
struct GroupedP128x128S5 {
  static constexpr int kTileM = 128, kTileN = 128, kStages = 5, kIssuers = 2;
  static constexpr bool kPrefetchScales = true, kXPromote = true;
};

// Gated: 16 tokens x (128 gate + 128 up rows), 3 stages (~100 KB, two CTAs per SM), the dense
// gated tile's configuration (gemm/swiglu.cu); more tokens per expert take several tiles.
struct GroupedSwiGlu16x256S3 {
  static constexpr int kTokens = 16, kStages = 3;
  static constexpr bool kHalves = false, kGated = true;
};

int run_grouped_gemm_swiglu_quant(const GroupedArgs& a) {
  return run_sm90_fp8_grouped<GroupedSwapAB<GroupedSwiGlu16x256S3>>(a);
}

int run_grouped_gemm(const GroupedArgs& a, int block_tokens) {
  switch (block_tokens) {
    case 8: return run_sm90_fp8_grouped<GroupedSwapAB<Grouped8x64S8>>(a);
    case 16: return run_sm90_fp8_grouped<GroupedSwapAB<Grouped16x64S8>>(a);
    case 32: return run_sm90_fp8_grouped<GroupedSwapAB<Grouped32x64S8>>(a);
    case 64: return run_sm90_fp8_grouped<GroupedSwapAB<Grouped64x64S6>>(a);
    case 128: return run_sm90_fp8_grouped<GroupedPersistent<GroupedP128x128S5>>(a);
    default: return FP8GEMM_ERR_CONFIG;
  }
}

}  // namespace fp8gemm

// Timeline trace reader of this translation unit (builds with -DFP8GEMM_TRACE only).
FP8GEMM_TRACE_READER(fp8gemm_trace_read_grouped)
// Per-stage probe reader of this translation unit (builds with -DFP8GEMM_TRACE_STAGES only).
FP8GEMM_STAGE_READER(fp8gemm_stage_read_grouped)
