// Small-M schedule (M <= 64..128): one CTA per 64 x TN output tile (one math warpgroup,
// 64 tokens on the wgmma M side), a deep TMA ring, TN small enough that the grid fills the
// SMs; optional split-K (blockIdx.y) into an f32 workspace with a deterministic reduce.
#pragma once
#include <type_traits>

#include "../scheduler.cuh"

namespace fp8gemm {

// kHalves_: promote one N half of the block accumulator while the other half's wgmma runs
// (the A tile is then read from shared memory twice per K block). kIssuers_: producer threads
// (in different warps) issuing the TMA loads of alternate stages. kXPromote_ (no halves): K block
// i+1's wgmma runs in a second block accumulator while K block i is promoted
// (mainloop_xpromote.cuh). kStreamK_: a resident grid shares the (tile, K block) units evenly
// (StreamKScheduler, streamk_fixup.cuh), as the swap-AB stream-K tiles: every SM streams weights
// where one tile per CTA leaves SMs idle (q|k|v at 33-64 tokens: 80 tiles of 128 columns).
// Compiled for development (gemm_small_m.cu), not dispatched.
template <int TN_, int kStages_, bool kHalves_ = true, int kIssuers_ = 1, bool kXPromote_ = false,
          bool kStreamK_ = false>
struct SmallM {
  static constexpr int kIssuers = kIssuers_;
  static constexpr int kMathWG = 1, kWaves = 1, TM = 64, TN = TN_, kStages = kStages_;
  static constexpr bool kSplitN = kHalves_;
  static constexpr bool kSwapAB = false, kPersistent = false, kStreamK = kStreamK_;
  static constexpr bool kGated = false;
  static constexpr int kGateRows = 0;
  static constexpr int kCluster = 1;
  static constexpr bool kTmaStore = false;  // direct stores (split-K / transposed outputs)
  static constexpr bool kPrefetchScales = false;  // one tile (stream-K: a few pieces) per CTA
  static constexpr bool kXPromote = kXPromote_;
  static constexpr bool kQuantIn = false;  // activations arrive quantized (TMA)
  static constexpr int kThreads = (kMathWG + 1) * 128;
  static constexpr int kMathRegs = 0, kProducerRegs = 0;  // <= 384 threads: 168 registers each
  using Scheduler = std::conditional_t<kStreamK_, StreamKScheduler<TM, TN>,
                                       OneTileScheduler<TM, TN, /*act on rows*/ true>>;
};

}  // namespace fp8gemm
