// Mid-M schedule: non-persistent warp-specialized. One producer warpgroup (one thread issues
// TMA; setmaxnreg.dec to 40) and two math warpgroups (setmaxnreg.inc to 232), each owning 64
// rows of a 128 x TN tile, with the promotion overlapped across K blocks (K block i+1's wgmma
// runs in a second block accumulator while K block i is promoted,
// pipeline/mainloop_xpromote.cuh).
#pragma once
#include "fp8gemm/scheduler/tile_scheduler.cuh"

namespace fp8gemm {

// A configuration `Cfg` is a struct naming every knob (gemm/warp_specialized.cu):
//   kTileN   output columns per tile (wgmma N)
//   kStages  ring depth
template <class Cfg>
struct WarpSpecialized {
  static constexpr bool kXPromote = true;
  // One TMA issuer: two (alternate stages) measured within the noise here.
  static constexpr int kIssuers = 1;
  static constexpr int kMathWG = 2, kWaves = 1, TM = 128, TN = Cfg::kTileN, kStages = Cfg::kStages;
  static constexpr bool kSplitN = false;  // one full-width wgmma per K block
  static constexpr bool kSwapAB = false, kPersistent = false, kStreamK = false;
  static constexpr bool kGated = false;
  static constexpr int kGateRows = 0;
  static constexpr bool kTmaStore = false;  // direct stores (split-K / transposed outputs)
  static constexpr bool kPrefetchScales = false;  // one tile per CTA: nothing to prefetch
  static constexpr int kThreads = (kMathWG + 1) * 128;
  static constexpr int kMathRegs = 232, kProducerRegs = 40;
  using Scheduler = OneTileScheduler<TM, TN, /*act on rows*/ true>;
};

}  // namespace fp8gemm
