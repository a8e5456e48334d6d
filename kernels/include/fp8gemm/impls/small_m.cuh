// Small-M schedule (M <= 64..128): one CTA per 64 x TN output tile (one math warpgroup,
// 64 tokens on the wgmma M side), a deep TMA ring, TN small enough that the grid fills the
// SMs; optional split-K (blockIdx.y): 2 splits summed in a 2-CTA cluster, more into an f32
// workspace with a deterministic reduce.
#pragma once
#include "fp8gemm/scheduler/tile_scheduler.cuh"

namespace fp8gemm {

// A configuration `Cfg` is a struct naming every knob (gemm/small_m.cu):
//   kTileN     output columns per tile (wgmma N): 64 or 128
//   kStages    ring depth
//   kHalves    main loop by N halves: one half of the block accumulator promoted while the other
//              half's wgmma runs (the A tile is then read from shared memory twice per K block)
//   kXPromote  main loop overlapped across K blocks: K block i+1's wgmma runs in a second block
//              accumulator while K block i is promoted (pipeline/mainloop_xpromote.cuh)
//   kIssuers   producer threads (in different warps) issuing the TMA loads of alternate stages
template <class Cfg>
struct SmallM {
  static_assert(!(Cfg::kHalves && Cfg::kXPromote), "one main loop");
  static constexpr int kIssuers = Cfg::kIssuers;
  static constexpr int kMathWG = 1, kWaves = 1, TM = 64, TN = Cfg::kTileN, kStages = Cfg::kStages;
  static constexpr bool kSplitN = Cfg::kHalves;
  static constexpr bool kSwapAB = false, kPersistent = false, kStreamK = false;
  static constexpr bool kGated = false;
  static constexpr int kGateRows = 0;
  static constexpr bool kTmaStore = false;  // direct stores (split-K / transposed outputs)
  static constexpr bool kPrefetchScales = false;  // one tile per CTA: nothing to prefetch
  static constexpr bool kXPromote = Cfg::kXPromote;
  static constexpr int kThreads = (kMathWG + 1) * 128;
  static constexpr int kMathRegs = 0, kProducerRegs = 0;  // <= 384 threads: 168 registers each
  using Scheduler = OneTileScheduler<TM, TN, /*act on rows*/ true>;
};

}  // namespace fp8gemm
