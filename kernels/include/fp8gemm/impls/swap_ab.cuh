// Swap-AB schedule for tiny M (decode sizes): compute y^T = w . qa^T. Weight rows sit on the
// wgmma M side (64 per warpgroup, no padding waste), the few tokens on its N side (TN = 8, 16,
// 32). Both operands stay K-major. The weight scale is one value per tile and K block; token
// scales are per MMA column. Split-K (blockIdx.y) spreads long K over the SMs; stream-K
// (kStreamK) shares the (tile, K block) units of a resident grid evenly instead.
//
// Gated (kGated: the MLP's gate/up GEMM with the SwiGLU epilogue, kOutSwiGluQuant): a tile
// holds 128 gate rows and the up rows of the same features in four waves (0-1 gate, 2-3 up):
// a whole quantization group per CTA, no cluster, no split-K.
#pragma once
#include <type_traits>

#include "fp8gemm/scheduler/tile_scheduler.cuh"

namespace fp8gemm {

// A configuration `Cfg` is a struct naming every knob (gemm/swap_ab.cu, gemm/swiglu.cu):
//   kTokens   tokens per tile (wgmma N): 8, 16 or 32
//   kStages   ring depth
//   kHalves   two N halves per K block, one promoted while the other's wgmma runs (each reads
//             the 64-row weight tile from shared memory); false: one full-width wgmma
//   kStreamK  a resident grid shares the (tile, K block) units evenly (StreamKScheduler),
//             partial tiles summed in the kernel (scheduler/streamk_fixup.cuh)
//   kGated    the gate/up tile with the SwiGLU + quantization epilogue (above)
template <class Cfg>
struct SwapAB {
  static_assert(!Cfg::kHalves || Cfg::kTokens >= 16, "N halves: whole n8 groups per half");
  static_assert(!Cfg::kStreamK || !Cfg::kGated, "stream-K: plain swap-AB tiles");
  static constexpr int kMathWG = 1, kWaves = Cfg::kGated ? 4 : 1, TM = 64 * kWaves,
                       TN = Cfg::kTokens, kStages = Cfg::kStages;
  static constexpr int kGateRows = Cfg::kGated ? 128 : 0;
  static constexpr bool kSplitN = Cfg::kHalves;
  static constexpr int kIssuers = 1;  // producer threads issuing TMA (paced first fill: its own)
  static constexpr bool kSwapAB = true, kPersistent = false, kStreamK = Cfg::kStreamK;
  static constexpr bool kGated = Cfg::kGated;
  static constexpr bool kTmaStore = false;  // direct stores (split-K / transposed outputs)
  static constexpr bool kPrefetchScales = false;  // one tile per CTA: nothing to prefetch
  static constexpr bool kXPromote = false;  // (tokens-on-M schedules only)
  static constexpr int kThreads = (kMathWG + 1) * 128;
  static constexpr int kMathRegs = 0, kProducerRegs = 0;
  using Scheduler = std::conditional_t<Cfg::kStreamK, StreamKScheduler<TM, TN>,
                                       OneTileScheduler<TM, TN, /*act on rows*/ false>>;
};

}  // namespace fp8gemm
