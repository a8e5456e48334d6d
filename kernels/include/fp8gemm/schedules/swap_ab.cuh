// Swap-AB schedule for tiny M: compute y^T = w . qa^T. Weight rows sit on the wgmma M side
// (64 per warpgroup, no padding waste), the few tokens on its N side (TN = 8/16/32/64).
// Both operands stay K-major. The weight scale is one value per tile and K block; token
// scales are per MMA column. Split-K (blockIdx.y) spreads long K over the SMs.
//
// Gated (kGateRows > 0: the MLP's gate/up GEMM with the SwiGLU epilogue, kOutSwiGluQuant): a
// tile holds kGateRows gate rows and the up rows of the same features, no split-K.
//   kGateRows = 128: four waves (0-1 gate, 2-3 up): a whole quantization group per CTA, no
//                    cluster; 256 weight rows, 33 KB per stage at 8 tokens.
//   kGateRows = 64: two waves (wave 0 gate, wave 1 up): one thread holds gate and up of an
//                   element; a 128-feature quantization group spans 2 CTAs.
//   kGateRows = 32: one wave (warps 0-1 gate, warps 2-3 up, exchanged through shared memory):
//                   the old gate/up tile's footprint (64 rows); a group spans 4 CTAs.
#pragma once
#include <type_traits>

#include "../scheduler.cuh"

namespace fp8gemm {

// kHalves_ = false: one full-width wgmma per K block instead of two N halves (TN >= 16), which
// each read the 64-row weight tile from shared memory.
// kQuantIn_: the activation operand is bf16 x, quantized inside the kernel by two producer
// warps (quant_operand.cuh) instead of TMA-loaded from a separate quantizer's (q, sa).
// kStreamK_: a resident grid shares the (tile, K block) units evenly (StreamKScheduler), partial
// tiles summed in the kernel (streamk_fixup.cuh) instead of one tile (or K split) per CTA.
template <int TOKENS, int kStages_, int kGateRows_ = 0, bool kHalves_ = true, bool kQuantIn_ = false,
          bool kStreamK_ = false>
struct SwapAB {
  static_assert(kGateRows_ == 0 || kGateRows_ == 32 || kGateRows_ == 64 || kGateRows_ == 128,
                "gate rows per tile");
  static_assert(!kStreamK_ || (kGateRows_ == 0 && !kQuantIn_), "stream-K: plain swap-AB tiles");
  static constexpr int kMathWG = 1, kWaves = kGateRows_ >= 64 ? kGateRows_ / 32 : 1, TM = 64 * kWaves,
                       TN = TOKENS, kStages = kStages_;
  static constexpr int kGateRows = kGateRows_;
  static constexpr bool kSplitN = kHalves_;  // keep two units in flight (N halves, or the two waves)
  static constexpr int kIssuers = 1;  // producer threads issuing TMA (paced first fill: its own)
  static constexpr bool kSwapAB = true, kPersistent = false, kStreamK = kStreamK_;
  static constexpr bool kGated = kGateRows_ > 0;
  static constexpr int kCluster = 1;
  static constexpr bool kTmaStore = false;  // direct stores (split-K / transposed outputs)
  static constexpr bool kPrefetchScales = false;  // one tile per CTA: nothing to prefetch
  static constexpr bool kXPromote = false;  // (warp-specialized / persistent only)
  static constexpr bool kQuantIn = kQuantIn_;
  static constexpr int kThreads = (kMathWG + 1) * 128;
  static constexpr int kMathRegs = 0, kProducerRegs = 0;
  using Scheduler = std::conditional_t<kStreamK_, StreamKScheduler<TM, TN>,
                                       OneTileScheduler<TM, TN, /*act on rows*/ false>>;
};

}  // namespace fp8gemm
