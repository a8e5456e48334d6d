// Compiled configurations of the swap-AB schedule (impls/swap_ab.cuh), kinds
// FP8GEMM_KIND_SWAP_AB and FP8GEMM_KIND_SWAP_AB_STREAMK: block_m = tokens per tile (wgmma N),
// block_n = 64 weight rows per tile (wgmma M).
#include "fp8gemm/impls/launch.cuh"
#include "fp8gemm/impls/swap_ab.cuh"

namespace fp8gemm {

// 8 tokens (1-8): ~74 KB, three CTAs per SM.
struct SwapAb8x64S8 {
  static constexpr int kTokens = 8, kStages = 8;
  static constexpr bool kHalves = false, kStreamK = false, kGated = false;
};
// 16 tokens (9-16): one full-width m64n16 wgmma per K block; two m64n8 halves (one promoted
// while the other runs) each read the weight tile from shared memory and measured slower in
// the decode step.
struct SwapAb16x64S8 {
  static constexpr int kTokens = 16, kStages = 8;
  static constexpr bool kHalves = false, kStreamK = false, kGated = false;
};
// 32 tokens (17-32): two N halves, one promoted while the other's wgmma runs.
struct SwapAb32x64S8 {
  static constexpr int kTokens = 32, kStages = 8;
  static constexpr bool kHalves = true, kStreamK = false, kGated = false;
};

// Stream-K (split_k = CTAs per SM): the same tiles sharing the (tile, K block) units of a
// resident grid evenly, partial tiles summed in the kernel.
// 16 tokens, 8 stages: two CTAs per SM.
struct SwapAbStreamK16x64S8 {
  static constexpr int kTokens = 16, kStages = 8;
  static constexpr bool kHalves = false, kStreamK = true, kGated = false;
};
// 16 tokens, 7 stages (~73 KB): three CTAs per SM.
struct SwapAbStreamK16x64S7 {
  static constexpr int kTokens = 16, kStages = 7;
  static constexpr bool kHalves = false, kStreamK = true, kGated = false;
};
// 32 tokens, 5 stages (~63 KB): three CTAs per SM.
struct SwapAbStreamK32x64S5 {
  static constexpr int kTokens = 32, kStages = 5;
  static constexpr bool kHalves = true, kStreamK = true, kGated = false;
};

const ConfigEntry* swap_ab_configs(int* count) {
  static const ConfigEntry kConfigs[] = {
      {FP8GEMM_KIND_SWAP_AB, 8, 64, 8, true, &run_sm90_fp8_gemm<SwapAB<SwapAb8x64S8>>, true},
      {FP8GEMM_KIND_SWAP_AB, 16, 64, 8, true, &run_sm90_fp8_gemm<SwapAB<SwapAb16x64S8>>, true},
      {FP8GEMM_KIND_SWAP_AB, 32, 64, 8, true, &run_sm90_fp8_gemm<SwapAB<SwapAb32x64S8>>, true},
      {FP8GEMM_KIND_SWAP_AB_STREAMK, 16, 64, 8, true,
       &run_sm90_fp8_gemm<SwapAB<SwapAbStreamK16x64S8>>, false},
      {FP8GEMM_KIND_SWAP_AB_STREAMK, 16, 64, 7, true,
       &run_sm90_fp8_gemm<SwapAB<SwapAbStreamK16x64S7>>, false},
      {FP8GEMM_KIND_SWAP_AB_STREAMK, 32, 64, 5, true,
       &run_sm90_fp8_gemm<SwapAB<SwapAbStreamK32x64S5>>, false},
  };
  *count = sizeof(kConfigs) / sizeof(kConfigs[0]);
  return kConfigs;
}

}  // namespace fp8gemm

// Timeline trace reader of this translation unit (builds with -DFP8GEMM_TRACE only).
FP8GEMM_TRACE_READER(fp8gemm_trace_read_swap_ab)
// Per-stage probe reader of this translation unit (builds with -DFP8GEMM_TRACE_STAGES only).
FP8GEMM_STAGE_READER(fp8gemm_stage_read_swap_ab)
