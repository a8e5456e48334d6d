// Large-M schedule (> 256): persistent warp-specialized. grid = #SMs; each CTA walks tiles in
// a grouped raster order. Two math warpgroups, each owning kWaves x 64 rows: with kWaves = 2
// a tile is 256 x TN (BM = 256 as 2 x 128) and each warpgroup runs two m64 waves per K block
// into one block accumulator, promoting each wave before the next (192 accumulator registers).
// Weight scales of the current tile are cached in shared memory for the whole K loop. With
// kTmaStore (every registered config) the epilogue stages the bf16 tile in shared memory and
// TMA-stores it, so the math warpgroups start the next tile without waiting for the stores.
// split_k > 1 (no multicast): the tiles of a partly empty last round run as K ranges summed in
// the kernel (tail_fixup.cuh) — dispatched at M = 65-256 where one round is far from full.
// kCluster = 2 (activation multicast over two column tiles) and 3 math warpgroups are supported
// but not registered. Multicast on the 128 x 128 tile saves ~2 % of the energy per GEMM at the
// board's power cap, where large-M GEMMs run (4096^3 92.6 vs 94.5 mJ), but its cluster launch
// costs 2-3 us outside a PDL chain (bench "ours" 400x4096x5120 25.0 vs 21.9 us; docs/PERF.md
// session 23); 3 math warpgroups were slower (docs/KERNELS.md).
#pragma once
#include "../scheduler.cuh"

namespace fp8gemm {

template <int kWaves_, int TN_, int kStages_, int kCluster_ = 1, int kMathWG_ = 2, bool kTmaStore_ = false,
          bool kPrefetchScales_ = false, int kIssuers_ = 1, bool kXPromote_ = false>
struct Persistent {
  // kXPromote_ (one wave): K block i+1's wgmma runs in a second block accumulator while K block
  // i is promoted.
  static constexpr bool kXPromote = kXPromote_;
  // kIssuers_: producer threads (in different warps) issuing the TMA loads of alternate stages.
  static constexpr int kIssuers = kIssuers_;
  static constexpr bool kTmaStore = kTmaStore_;
  // The next tile's weight scales copied (cp.async) into a second cache buffer during this
  // tile: 128x128 x 5 3-8 % faster, 256x128 x 3 -2 to +7 % (session 7, harness A/B).
  static constexpr bool kPrefetchScales = kPrefetchScales_;
  // kCluster_ = 2: two CTAs (neighbouring column tiles) share the activation tile by TMA multicast.
  static constexpr int kCluster = kCluster_;
  static constexpr int kMathWG = kMathWG_, kWaves = kWaves_, TM = 64 * kMathWG_ * kWaves_, TN = TN_,
                       kStages = kStages_;
  static constexpr bool kSplitN = false;  // promote one N half while the other runs
  static constexpr bool kSwapAB = false, kPersistent = true, kStreamK = false;
  static constexpr bool kGated = false;
  static constexpr int kGateRows = 0;
  static constexpr bool kQuantIn = false;  // activations arrive quantized (TMA)
  static constexpr int kThreads = (kMathWG + 1) * 128;
  // Register split: 2 math warpgroups 232 + producer 40; 3 math warpgroups 160 + producer 24.
  static constexpr int kMathRegs = kMathWG_ == 2 ? 232 : 160;
  static constexpr int kProducerRegs = kMathWG_ == 2 ? 40 : 24;
  static constexpr int kGroup = 8;  // row tiles swept together
  using Scheduler = PersistentScheduler<TM, TN, kGroup, kCluster>;
};

}  // namespace fp8gemm
