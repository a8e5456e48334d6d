// Swap-AB schedule for tiny M: compute y^T = w . qa^T. Weight rows sit on the wgmma M side
// (64 per warpgroup, no padding waste), the few tokens on its N side (TN = 8/16/32/64).
// Both operands stay K-major. The weight scale is one value per tile and K block; token
// scales are per MMA column. Split-K (blockIdx.y) spreads long K over the SMs.
//
// kGated (the MLP's gate/up GEMM with the SwiGLU epilogue, kOutSwiGluQuant): two waves per
// tile, wave 0 = 64 gate rows, wave 1 = the 64 up rows of the same features (one weight scale
// per wave), so one thread holds gate and up of each output element; no split-K.
#pragma once
#include "../scheduler.cuh"

namespace fp8gemm {

template <int TOKENS, int kStages_, bool kGated_ = false>
struct SwapAB {
  static constexpr int kMathWG = 1, kWaves = kGated_ ? 2 : 1, TM = 64 * kWaves, TN = TOKENS,
                       kStages = kStages_;
  static constexpr bool kSplitN = true;  // keep two units in flight (N halves, or the two waves)
  static constexpr bool kSwapAB = true, kPersistent = false;
  static constexpr bool kGated = kGated_;
  static constexpr int kCluster = 1;
  static constexpr int kThreads = (kMathWG + 1) * 128;
  static constexpr int kMathRegs = 0, kProducerRegs = 0;
  using Scheduler = OneTileScheduler<TM, TN, /*act on rows*/ false>;
};

}  // namespace fp8gemm
