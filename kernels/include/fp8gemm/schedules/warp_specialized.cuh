// Mid-M schedule (129..256): non-persistent warp-specialized. One producer warpgroup (one
// thread issues TMA; setmaxnreg.dec to 40) and two math warpgroups (setmaxnreg.inc to 232),
// each owning 64 rows of a 128 x TN tile.
#pragma once
#include "../scheduler.cuh"

namespace fp8gemm {

// kXPromote_: K block i+1's wgmma runs (second block accumulator) while K block i is promoted.
template <int TN_, int kStages_, int kCluster_ = 1, bool kXPromote_ = false>
struct WarpSpecialized {
  static constexpr bool kXPromote = kXPromote_;
  // One TMA issuer: two (alternate stages) measured within the noise here (session 21).
  static constexpr int kIssuers = 1;
  // kCluster_ = 2: two CTAs (neighbouring column tiles) share the activation tile by TMA multicast.
  static constexpr int kCluster = kCluster_;
  static constexpr int kMathWG = 2, kWaves = 1, TM = 128, TN = TN_, kStages = kStages_;
  static constexpr bool kSplitN = false;  // promote one N half while the other runs
  static constexpr bool kSwapAB = false, kPersistent = false, kStreamK = false;
  static constexpr bool kGated = false;
  static constexpr int kGateRows = 0;
  static constexpr bool kTmaStore = false;  // direct stores (split-K / transposed outputs)
  static constexpr bool kPrefetchScales = false;  // one tile per CTA: nothing to prefetch
  static constexpr bool kQuantIn = false;  // activations arrive quantized (TMA)
  static constexpr int kThreads = (kMathWG + 1) * 128;
  static constexpr int kMathRegs = 232, kProducerRegs = 40;
  using Scheduler = OneTileScheduler<TM, TN, /*act on rows*/ true, kCluster>;
};

}  // namespace fp8gemm
