// Large-M schedule: persistent warp-specialized. grid = #SMs; each CTA walks tiles in a grouped
// raster order. Two math warpgroups (setmaxnreg 232, producer 40), each owning kWaves x 64 rows:
// a 256-row tile is 2 x 128 and each warpgroup runs two m64 waves per K block into one block
// accumulator, promoting each wave before the next (192 accumulator registers). Weight scales
// of the current tile are cached in shared memory for the whole K loop. The epilogue stages
// the bf16 tile in shared memory and TMA-stores it, so the math warpgroups start the next tile
// without waiting for the stores. split_k > 1: the tiles of a partly empty last round run as K
// ranges summed in the kernel (scheduler/tail_fixup.cuh) — dispatched at M = 65-256 where one
// round is far from full.
#pragma once
#include "fp8gemm/scheduler/tile_scheduler.cuh"

namespace fp8gemm {

// A configuration `Cfg` is a struct naming every knob (gemm/persistent.cu):
//   kTileM           output rows per tile: 128 (one m64 wave per math warpgroup) or 256 (two)
//   kTileN           output columns per tile (wgmma N)
//   kStages          ring depth
//   kIssuers         producer threads (in different warps) issuing the TMA loads of alternate
//                    stages
//   kPrefetchScales  the next tile's weight scales copied (cp.async) into a second cache buffer
//                    during this tile
//   kXPromote        (128-row tiles) K block i+1's wgmma runs in a second block accumulator
//                    while K block i is promoted (pipeline/mainloop_xpromote.cuh)
template <class Cfg>
struct Persistent {
  static_assert(Cfg::kTileM == 128 || Cfg::kTileM == 256, "one or two m64 waves per warpgroup");
  static constexpr bool kXPromote = Cfg::kXPromote;
  static constexpr int kIssuers = Cfg::kIssuers;
  static constexpr bool kTmaStore = true;
  static constexpr bool kPrefetchScales = Cfg::kPrefetchScales;
  static constexpr int kMathWG = 2, kWaves = Cfg::kTileM / 128, TM = Cfg::kTileM, TN = Cfg::kTileN,
                       kStages = Cfg::kStages;
  static constexpr bool kSplitN = false;  // one full-width wgmma per wave
  static constexpr bool kSwapAB = false, kPersistent = true, kStreamK = false;
  static constexpr bool kGated = false;
  static constexpr int kGateRows = 0;
  static constexpr int kThreads = (kMathWG + 1) * 128;
  static constexpr int kMathRegs = 232, kProducerRegs = 40;
  static constexpr int kGroup = 8;  // row tiles swept together
  using Scheduler = PersistentScheduler<TM, TN, kGroup>;
};

}  // namespace fp8gemm
