// Split tail of the persistent schedule: when the tiles leave the last round over the grid
// partly empty, the tiles of that round are cut into K ranges (one unit per CTA, all in the
// last round) and summed in a fix-up, instead of leaving most SMs idle for a whole tile.
//
// A tile split S ways: the units of K ranges 0 .. S-2 publish their f32 accumulators to the
// workspace and count themselves in a flag (per math warpgroup: the rows of a warpgroup are its
// own); the unit of the last range adds them to its own in range order (deterministic) and
// stores the tile. Units of one tile run on consecutive CTAs with the last range on the highest
// index, and the hardware starts a grid's CTAs in index order: the CTAs a unit waits for are
// running or done, so the wait cannot deadlock even when the grid shares the GPU.
//
// Workspace: a 4 KiB page of flags, then the partial tiles. The waiting unit resets its flags,
// so the page stays zero between launches: it must be zero when the buffer is first used (the
// callers allocate it zeroed) and no other kind of launch may write it (the callers keep the
// persistent schedule's workspace apart from the split-K partials of the other schedules). A
// wait that outlasts kTailWaitNs (a broken contract, never a slow peer) traps: the launch
// fails with an error instead of hanging.
#pragma once
#include <cstddef>
#include <cstdint>

#include "fp8gemm/ptx/flag.cuh"
#include "fp8gemm/ptx/mbarrier.cuh"
#include "fp8gemm/ptx/timer.cuh"

namespace fp8gemm {

struct TailPlan {
  int first;   // first split tile (tile ids >= first are split); = tiles when none is
  int splits;  // K ranges per split tile (1: no split tail)
  int tiles;   // split tiles (the last round's)
};

// Flags page at the start of the workspace: 4 flags (one per math warpgroup) per split tile.
constexpr int kTailFlagBytes = 4096;
constexpr int kTailMaxTiles = kTailFlagBytes / 16;
constexpr unsigned long long kTailWaitNs = 5000000000ull;

// Which tiles a persistent grid of at most `grid` CTAs splits, for a requested split S >= 2:
// those of the last, partial round, S ways or as many as one round of units holds (at least 2,
// at most one K block per range); none when the tiles fill their rounds.
__host__ __device__ inline TailPlan persistent_tail(int64_t tiles, int64_t grid, int requested, int kb) {
  TailPlan t{static_cast<int>(tiles), 1, 0};
  if (requested < 2 || grid < 2 || tiles < 1) return t;
  const int64_t last = tiles % grid;
  if (last == 0 || last > kTailMaxTiles) return t;
  int64_t s = requested;
  if (s > grid / last) s = grid / last;
  if (s > kb) s = kb;
  if (s < 2) return t;
  t.first = static_cast<int>(tiles - last);
  t.splits = static_cast<int>(s);
  t.tiles = static_cast<int>(last);
  return t;
}

// Workspace of a split tail: the flags page, then (S - 1) f32 partial tiles per split tile.
__host__ __device__ inline size_t tail_workspace_bytes(const TailPlan& t, int tm, int tn) {
  if (t.splits < 2) return 0;
  return kTailFlagBytes + static_cast<size_t>(t.tiles) * (t.splits - 1) * tm * tn * 4;
}

// A warpgroup thread's share of a partial tile in the workspace: float4 x of wave w of thread t
// sits at `slot + (w * kAcc / 4 + x) * 128` (slot = the tile's base + t), so a warpgroup's
// stores are whole 2 KB lines. Written through L2 (another SM reads them), added in the same
// layout.
template <int kWaves, int kAcc>
__device__ __forceinline__ void store_partial(const float (&acc)[kWaves][kAcc], float4* slot) {
  static_assert(kAcc % 4 == 0, "whole float4 per thread");
#pragma unroll
  for (int w = 0; w < kWaves; ++w)
#pragma unroll
    for (int x = 0; x < kAcc / 4; ++x)
      __stcg(slot + (w * (kAcc / 4) + x) * 128,
             make_float4(acc[w][4 * x], acc[w][4 * x + 1], acc[w][4 * x + 2], acc[w][4 * x + 3]));
}
template <int kWaves, int kAcc>
__device__ __forceinline__ void add_partial(float (&acc)[kWaves][kAcc], const float4* slot) {
#pragma unroll
  for (int w = 0; w < kWaves; ++w)
#pragma unroll
    for (int x = 0; x < kAcc / 4; ++x) {
      const float4 v = __ldcg(slot + (w * (kAcc / 4) + x) * 128);  // L2: another SM wrote it
      acc[w][4 * x] += v.x;
      acc[w][4 * x + 1] += v.y;
      acc[w][4 * x + 2] += v.z;
      acc[w][4 * x + 3] += v.w;
    }
}

// One math warpgroup's part of the fix-up of tail tile `tail`, K range `split` of `splits`;
// `acc` holds the warpgroup's kWaves m64 x (2 * kAcc) fragments. Returns true when this unit
// stores the tile (acc then holds the sum of every range), false when it only published.
// `bar`: a named barrier of the warpgroup's 128 threads.
template <int kMathWG, int kWaves, int kAcc>
__device__ __forceinline__ bool tail_fixup(float (&acc)[kWaves][kAcc], float* ws, int tail,
                                           int split, int splits, int wg, int tid_wg, uint32_t bar) {
  static_assert(kAcc % 4 == 0, "whole float4 per thread");
  constexpr int kWgFloats = kWaves * kAcc * 128;  // one warpgroup's rows of a tile
  constexpr int kTile = kMathWG * kWgFloats;
  int* flag = reinterpret_cast<int*>(ws) + tail * 4 + wg;
  float* partials = ws + kTailFlagBytes / 4;
  auto slot = [&](int s) {
    return reinterpret_cast<float4*>(partials + (static_cast<size_t>(tail) * (splits - 1) + s) * kTile + wg * kWgFloats) +
           tid_wg;
  };
  if (split < splits - 1) {
    store_partial(acc, slot(split));
    ptx::named_barrier_sync(bar, 128);  // every thread's partials written
    if (tid_wg == 0) ptx::red_release_gpu_add(flag, 1);
    return false;
  }
  if (tid_wg == 0) {
    const unsigned long long t0 = ptx::globaltimer_ns();
    while (ptx::ld_acquire_gpu(flag) != splits - 1)
      if (ptx::globaltimer_ns() - t0 > kTailWaitNs) __trap();
    ptx::st_relaxed_gpu(flag, 0);  // zero again for the next launch (no one else touches it now)
  }
  ptx::named_barrier_sync(bar, 128);  // the partials are visible to the whole warpgroup
  for (int s = 0; s < splits - 1; ++s) add_partial(acc, slot(s));
  return true;
}

}  // namespace fp8gemm
