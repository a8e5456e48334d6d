// Fix-up of the stream-K schedule (StreamKScheduler, tile_scheduler.cuh): a tile whose K blocks
// several CTAs share is stored by the CTA holding its last K block. Each other one publishes its
// f32 accumulators in its own slot of the workspace (CTA b: slot b; a CTA publishes at most once
// per launch, for the highest tile of its range) and raises its flag. The storer waits for the
// flags of the CTAs holding the tile's earlier K blocks — lower indices, which the hardware
// starts before it, and which publish as their first work — adds their partials in CTA order
// (deterministic for a grid size) and zeroes the flags it read (each flag has one reader), so
// the page is zero between launches.
//
// Workspace: the 4 KiB flags page (one flag per CTA), then one partial tile per CTA. As with the
// persistent split tail (tail_fixup.cuh), it must be zero when first used and no other kind of
// launch may write it; a wait that outlasts kTailWaitNs traps instead of hanging.
#pragma once
#include <cstddef>
#include <cstdint>

#include "fp8gemm/ptx/flag.cuh"
#include "fp8gemm/ptx/mbarrier.cuh"
#include "fp8gemm/ptx/timer.cuh"
#include "fp8gemm/scheduler/tile_scheduler.cuh"
#include "fp8gemm/scheduler/tail_fixup.cuh"

namespace fp8gemm {

// One flag per CTA in the flags page.
constexpr int kStreamKMaxCtas = kTailFlagBytes / 4;

// Workspace of a stream-K grid of `grid` CTAs on tm x tn tiles.
__host__ __device__ inline size_t streamk_workspace_bytes(int64_t grid, int tm, int tn) {
  return kTailFlagBytes + static_cast<size_t>(grid) * tm * tn * 4;
}

// The CTA of a grid of `grid` whose units hold unit `u` of `units` (ranges [b U / G, (b+1) U / G)).
__host__ __device__ inline int streamk_owner(int64_t u, int64_t units, int64_t grid) {
  return static_cast<int>(((u + 1) * grid - 1) / units);
}

// acc += p0, then += p1 (add_partial twice), with both partials' loads in flight at once.
template <int kWaves, int kAcc>
__device__ __forceinline__ void add_partials2(float (&acc)[kWaves][kAcc], const float4* p0, const float4* p1) {
  constexpr int kV = kWaves * kAcc / 4;
  float4 v0[kV], v1[kV];
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    v0[i] = __ldcg(p0 + i * 128);
    v1[i] = __ldcg(p1 + i * 128);
  }
#pragma unroll
  for (int w = 0; w < kWaves; ++w)
#pragma unroll
    for (int x = 0; x < kAcc / 4; ++x) {
      const int i = w * (kAcc / 4) + x;
      acc[w][4 * x] = acc[w][4 * x] + v0[i].x + v1[i].x;
      acc[w][4 * x + 1] = acc[w][4 * x + 1] + v0[i].y + v1[i].y;
      acc[w][4 * x + 2] = acc[w][4 * x + 2] + v0[i].z + v1[i].z;
      acc[w][4 * x + 3] = acc[w][4 * x + 3] + v0[i].w + v1[i].w;
    }
}

// Threads of a publish's named barrier: the math warpgroup and the publisher warp.
constexpr uint32_t kStreamKPublishThreads = 128 + 32;

// Whether a CTA publishes tile `t` (holds part of its K blocks, not the last): the math
// warpgroup (streamk_fixup) and the publisher warp (streamk_publish) must agree, or the named
// barrier between them never completes.
__device__ __forceinline__ bool streamk_publishes(const Tile& t) { return t.tail >= 0 && !t.split; }

// The fix-up of a partial tile `t` for one math warpgroup (thread tid of 128) holding kWaves
// m64 x (2 * kAcc) fragments in `acc`. Returns true when this CTA stores the tile (acc then holds
// the sum of every share), false when it only published. `bar`: a named barrier of the 128.
// A publish only writes the partials and arrives on `pub_bar`; another warp of the CTA raises
// the flag (streamk_publish). Under the grid's weight stream the flag's release (a GPU-scope
// fence) took 4-10 µs, and the math warps used to wait for it before their next tile: in q|k|v
// at 16 tokens a CTA whose first tile was done at 2.8 µs started its second at 12.8, with the
// SM's other CTAs' last K blocks, and every two-tile CTA ended ~3.5 µs after the one-tile ones
// (per-piece trace).
template <int kWaves, int kAcc>
__device__ __forceinline__ bool streamk_fixup(float (&acc)[kWaves][kAcc], float* ws, const Tile& t,
                                              const TileShape& s, int tid, uint32_t bar, uint32_t pub_bar) {
  static_assert(kAcc % 4 == 0, "whole float4 per thread");
  constexpr int kFloats = kWaves * kAcc * 128;
  int* flags = reinterpret_cast<int*>(ws);
  float* partials = ws + kTailFlagBytes / 4;
  auto slot = [&](int b) {
    return reinterpret_cast<float4*>(partials + static_cast<size_t>(b) * kFloats) + tid;
  };
  const int me = static_cast<int>(blockIdx.x);
  if (streamk_publishes(t)) {
    store_partial(acc, slot(me));
    ptx::named_barrier_arrive(pub_bar, kStreamKPublishThreads);  // my partials written
    return false;
  }
  const int first = streamk_owner(static_cast<int64_t>(t.tail) * s.kb_total, streamk_units(s), gridDim.x);
  // The flags are polled by warp 0's lanes in parallel (one L2 round trip, not one per
  // publisher, under the weight stream ~1 µs each), the partials loaded two at a time (added in
  // CTA order all the same: the same bits).
  if (tid < 32) {
    const unsigned long long t0 = ptx::globaltimer_ns();
    for (int b = first + tid; b < me; b += 32) {
      while (ptx::ld_acquire_gpu(flags + b) == 0)
        if (ptx::globaltimer_ns() - t0 > kTailWaitNs) __trap();
      ptx::st_relaxed_gpu(flags + b, 0);  // zero again for the next launch (its one reader)
    }
  }
  ptx::named_barrier_sync(bar, 128);  // the partials are visible to the whole warpgroup
  int b = first;
  for (; b + 1 < me; b += 2) add_partials2(acc, slot(b), slot(b + 1));  // CTA order: deterministic
  if (b < me) add_partial(acc, slot(b));
  return true;
}

// The publisher warp's half of a publish (every lane of one warp not in the math warpgroup;
// `sched`: a fresh copy of the CTA's scheduler). A CTA publishes at most its first tile (the
// highest of its range: partial, without the tile's last K block; every later one holds its
// tile's last K block): then wait for the math warpgroup's partials, and raise the flag.
template <class Scheduler>
__device__ __forceinline__ void streamk_publish(Scheduler sched, float* ws, uint32_t pub_bar) {
  Tile t;
  if (!sched.next(t) || !streamk_publishes(t)) return;
  ptx::named_barrier_sync(pub_bar, kStreamKPublishThreads);
  if (threadIdx.x % 32 == 0) ptx::red_release_gpu_add(reinterpret_cast<int*>(ws) + blockIdx.x, 1);
}

}  // namespace fp8gemm
