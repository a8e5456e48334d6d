// sm90_fp8_gemm_1d2d: the blocked-FP8 GEMM body shared by every schedule.
//
//   y[m, n] = sum_kb sa[m, kb] * sw[n/128, kb] * sum_{k in kb} qa[m, k] * w[n, k]
//
// "1d2d": activation scales per (token, 128-K) (1-D blocks), weight scales per (128 x 128)
// (2-D blocks). A schedule (impls/small_m.cuh, swap_ab.cuh, warp_specialized.cuh,
// persistent.cuh) is a traits struct: tile shape, warpgroups, stages, operand roles (normal or
// swap-AB) and the tile scheduler. The kernel is:
//   * one producer warpgroup (one thread, or kIssuers threads taking alternate stages, issues
//     TMA into the ring),
//   * kMathWG consumer warpgroups, each owning kWaves x 64 MMA rows of the tile, which per
//     K block issue 4 x wgmma m64nTNk32 into a block accumulator, wait, and promote it into
//     the f32 accumulator with both scales (two-level accumulation).
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <type_traits>

#include "fp8gemm/epilogue/store.cuh"
#include "fp8gemm/pipeline/kblock_mma.cuh"
#include "fp8gemm/pipeline/mainloop_xpromote.cuh"
#include "fp8gemm/pipeline/ring.cuh"
#include "fp8gemm/ptx/mbarrier.cuh"
#include "fp8gemm/ptx/tma.cuh"
#include "fp8gemm/ptx/wgmma.cuh"
#include "fp8gemm/scheduler/tile_scheduler.cuh"
#include "fp8gemm/scheduler/grouped_scheduler.cuh"
#include "fp8gemm/scheduler/streamk_fixup.cuh"
#include "fp8gemm/epilogue/swiglu.cuh"
#include "fp8gemm/scheduler/tail_fixup.cuh"
#include "fp8gemm/common/trace.cuh"

namespace fp8gemm {

struct GemmParams {
  int m, n, k;     // problem (y is m x n)
  int kb_total;    // ceil(k / 128) = row stride of sw (the last K block may be partial)
  int nb_total;    // ceil(n / 128) = rows of sw
  TileShape shape; // tiles in MMA space, K split
  // kOutSwiGluQuant only: the down projection's activation operand (q [m][n/2] e4m3,
  // sa [n/256][m_pad] f32), see the mode's comment.
  uint8_t* q_out;
  float* sa_out;
  // Swap-AB (not gated): stream the weights with an L2 evict-first policy (impls/launch.cuh,
  // kWeightEvictFirst), so that they do not push the activations, residual stream and KV cache
  // out of L2.
  int w_evict_first;
  // Swap-AB: pace the first fill of the ring to this many weight stages in flight per CTA until
  // the previous kernel is done (0: request them all at once). impls/launch.cuh, kPrefillWindow.
  int prefill_window;
  // Grouped schedules (impls/grouped.cuh) only: the experts' token layout. m is then the token
  // rows of the stacked operand, n the output features of one expert, nb_total the scale rows
  // of all experts' weights.
  GroupedLayout group;
};

// Whether a schedule is grouped (its traits say kGrouped = true; the dense ones do not say).
template <class T, class = void>
struct IsGrouped : std::false_type {};
template <class T>
struct IsGrouped<T, std::void_t<decltype(T::kGrouped)>> : std::bool_constant<T::kGrouped> {};

// The schedule's tile scheduler for this launch.
template <class T>
__device__ __forceinline__ typename T::Scheduler make_scheduler(const GemmParams& p) {
  if constexpr (IsGrouped<T>::value) return typename T::Scheduler(p.shape, p.group, p.m, p.n);
  else return typename T::Scheduler(p.shape);
}

// Traits every schedule provides (derived from its configuration's named knobs, impls/*.cuh):
//   kMathWG, kWaves, TM (= kMathWG * kWaves * 64), TN, kStages,
//   kSwapAB, kThreads, kMathRegs/kProducerRegs (0 = no setmaxnreg), Scheduler, kSplitN (keep
//   two units of MMA work in flight: the N halves of a one-wave tile),
//   kIssuers (producer threads, one per warp, issuing the TMA loads of alternate stages),
//   kGated / kGateRows (swap-AB tile of kGateRows = 128 gate rows + the same features' up rows,
//   for kOutSwiGluQuant; impls/swap_ab.cuh), kTmaStore (kOutBf16 through shared memory and
//   TMA stores), kPrefetchScales, kXPromote (pipeline/mainloop_xpromote.cuh), kPersistent,
//   kStreamK (swap-AB: StreamKScheduler)
// Output modes of one kernel instantiation.
enum OutMode : int {
  kOutBf16 = 0,        // store y directly
  kOutWorkspace = 1,   // split-K: f32 partials to the workspace, a reduce kernel follows
  kOutClusterSum = 2,  // split-K: the splits of a tile form a cluster (1, S, 1) that sums the
                       // accumulators through distributed shared memory in rank order
  kOutSwiGluQuant = 3, // gated swap-AB: h = bf16(silu(bf16 gate) * bf16 up) quantized per
                       // token per 128 features (a whole group per tile)
};

// Split-K over a 2-CTA cluster, small-M schedules (one warpgroup publishes the tile): each CTA
// owns half of the tile's columns and pushes the other half of its f32 partials into its
// peer's inbox (fire-and-forget DSMEM stores, one cluster barrier, local reads). The other
// schedules pull the peer's partials from its idle ring (two barriers): the swap-AB decode
// tiles keep their footprint (CTAs per SM), the 2-warpgroup tiles have no room.
template <class T>
__host__ __device__ constexpr bool cluster_sum_push() {
  return !T::kSwapAB && !T::kPersistent && !T::kStreamK && !T::kGated && T::kMathWG == 1 &&
         T::TN >= 16;
}
template <class T>
__host__ __device__ constexpr int cluster_inbox_bytes() {
  return cluster_sum_push<T>() ? T::kWaves * (T::TN / 4) * 128 * 4 : 0;  // half of TN/2 per thread
}

// Grouped schedules load a tile's activation scales from the 16-byte boundary at or below its
// first token (a TMA box whose inner start is not 16-byte aligned stops the kernel with an
// illegal instruction; a contiguous layout's experts start at any row): kGroupedScalePad more
// tokens per box, and the consumers read from the first token's offset in it.
constexpr int kGroupedScalePad = 4;
template <class T>
__host__ __device__ constexpr int scale_box_tokens() {
  return (T::kSwapAB ? T::TN : T::TM) + (IsGrouped<T>::value ? kGroupedScalePad : 0);
}

// Shared-memory layout of a schedule; with kTmaStore the output staging holds the whole tile.
template <class T>
using RingOf = SmemRing<T::kStages, T::TM, T::TN, scale_box_tokens<T>(),
                        T::kTmaStore ? T::TM * T::TN * 2 : 0, cluster_inbox_bytes<T>(), T::kSwapAB>;

// A grouped tile's first token as the scale map's inner coordinate: masked, within its
// expert's [kb][pad4(max_m)] block; contiguous, the token row. Its low bits are the offset of
// the tile's scales in the (aligned) box.
template <class T>
__device__ __forceinline__ int grouped_scale_tok(const Tile& t, int max_m) {
  const int tok0 = T::kSwapAB ? t.col0 : t.row0;
  return max_m > 0 ? tok0 - t.expert * max_m : tok0;
}

// Rows of sw (128-row blocks of W) one tile can touch.
template <class T>
__host__ __device__ constexpr int sw_rows_per_tile() {
  if (T::kGated) return 2;  // the gate rows' block and the up rows' block
  if (T::kSwapAB || 128 % T::TN == 0) return 1;
  return T::TN / 128;
}

// The 16-token stream-K tiles (the scheduler and fix-up raise the count to ~94) must keep the
// plain decode tile's three CTAs per SM (<= 80 registers).
template <class T>
__host__ __device__ constexpr int min_ctas_per_sm() {
  return T::kStreamK && T::TN <= 16 ? 3 : 1;
}
template <class T, int kMode>
__global__ void __launch_bounds__(T::kThreads, min_ctas_per_sm<T>())
    sm90_fp8_gemm_1d2d_kernel(const __grid_constant__ CUtensorMap tmap_a,
                              const __grid_constant__ CUtensorMap tmap_b,
                              const __grid_constant__ CUtensorMap tmap_sa,
                              const __grid_constant__ CUtensorMap tmap_y,
                              const float* __restrict__ sw, __nv_bfloat16* __restrict__ y,
                              float* __restrict__ partial, const GemmParams p) {
  using MMA = ptx::WgmmaE4M3<T::TN>;
  using Ring = RingOf<T>;
  constexpr int kMathThreads = T::kMathWG * 128;
  constexpr int kAcc = MMA::kAcc;
  // Weight-scale rows a tile touches: plain swap-AB tiles (TM <= 128) and TN <= 128 tiles sit
  // inside one 128-row block of W; a gated tile covers the gate rows' and the up rows' blocks.
  constexpr int kSwRows = sw_rows_per_tile<T>();
  static_assert(T::kSwapAB || 128 % T::TN == 0 || T::TN % 128 == 0,
                "tokens-on-M tiles: a width that divides or is a multiple of 128");
  static_assert(T::TM == T::kMathWG * T::kWaves * 64, "TM = warpgroups x waves x 64");
  static_assert(!T::kSwapAB || 128 % (T::kGated ? T::kGateRows : T::TM) == 0,
                "swap-AB: a weight tile (each half of a gated one) must sit inside one 128-row "
                "block of weight scales");
  static_assert(T::TN % 8 == 0 && T::TN <= 256, "wgmma N");
  static_assert(!T::kGated || (T::kSwapAB && T::kMathWG == 1 && T::kGateRows == 128 &&
                                T::TM == 2 * T::kGateRows),
                "gated: one swap-AB warpgroup, 128 gate rows then as many up rows");
  static_assert((kMode == kOutSwiGluQuant) == T::kGated, "the gated schedule has its own output");
  // Bytes the TMA thread's arrive expects per stage.
  constexpr uint32_t kStageTx = RingOf<T>::kTxBytes;
  // TMA-store epilogue: bf16 output of a tokens-on-M tile (other modes store directly).
  constexpr bool kStoreTma = T::kTmaStore && kMode == kOutBf16;
  static_assert(!T::kTmaStore || (!T::kSwapAB && T::TN % 64 == 0),
                "TMA-store epilogue: tokens on the MMA M side, whole 64-column boxes");
  // Promotion overlapped across K blocks (pipeline/mainloop_xpromote.cuh): one wave, one
  // weight-scale block per tile, tokens on M.
  constexpr bool kXPromote = T::kXPromote;
  static_assert(!T::kXPromote || (T::kWaves == 1 && !T::kSwapAB && !T::kSplitN &&
                                  !T::kGated && 128 % T::TN == 0),
                "kXPromote: one m64 wave per warpgroup, a tokens-on-M tile inside one weight-scale block");
  // Cluster barriers the epilogue runs (every thread of the CTA must take part in each).
  constexpr bool kPushSum = kMode == kOutClusterSum && cluster_sum_push<T>();
  // Stream-K: the named barrier between the math warpgroup and warp 2 of the producer warpgroup,
  // which raises the flag of a published partial (streamk_fixup.cuh); ids 1 and 2 + wg are the
  // math warpgroups' own.
  constexpr uint32_t kStreamKPublishBar = 2 + T::kMathWG;
  static_assert(!T::kStreamK || T::kIssuers <= 2, "stream-K: warp 2 of the producer warpgroup publishes");
  constexpr int kEpilogueClusterSyncs = kPushSum ? 1 : kMode == kOutClusterSum ? 2 : 0;

  // Timeline trace marks (-DFP8GEMM_TRACE, thread 0, a math thread): 2 first K block landed,
  // 3 last K block done, 1 past the math warps' griddepcontrol.wait (after the main loop, so it
  // follows 3), end after its epilogue.
  FP8GEMM_TRACE_BEGIN(FP8GEMM_TRACE_GEMM);
  extern __shared__ uint8_t smem_raw[];
  const Ring ring(smem_raw);
  float* sw_cache = ring.sw_cache();

  const int wg = threadIdx.x / 128;
  const int tid_wg = threadIdx.x % 128;

  if (threadIdx.x == 0) {
    ptx::prefetch_tensormap(&tmap_a);
    ptx::prefetch_tensormap(&tmap_b);
    ptx::prefetch_tensormap(&tmap_sa);
    if constexpr (kStoreTma) ptx::prefetch_tensormap(&tmap_y);
    ring.init(T::kMathWG * 4);  // empty: every consumer warp
  }
  __syncthreads();
  // Push-sum clusters write into the peer's shared memory: the peer must have started. This
  // arrive is waited for just before the pushes (by then it long has).
  if constexpr (kPushSum) ptx::cluster_arrive_relaxed();
  // Programmatic dependent launch: everything up to griddep_wait overlaps the previous kernel
  // (typically the activation quantizer, which triggers at its entry): only the weights
  // (W, sw), which no kernel writes, are read before it; qa, sa, y and the workspace only after
  // it. We trigger our own dependents late (all loads issued / main loop done): triggering at
  // entry as well was measured and gained nothing (bench, 1×4096²: 6.41 vs 6.35 µs hot).

  typename T::Scheduler sched = make_scheduler<T>(p);
  Tile tile;
  constexpr bool kGrouped = IsGrouped<T>::value;
  static_assert(!kGrouped || (!T::kStreamK && !T::kTmaStore && (T::kSwapAB || !T::kGated)),
                "grouped: tiles of the grouped scheduler, stored directly (bounded by the counts)");
  // Swap-AB with a prefill window: the first pass's weights are loaded paced (producer below).
  const bool paced = T::kSwapAB && p.prefill_window > 0;

  if (wg == T::kMathWG) {
    // ---- TMA warp-group: loads A, B and the activation scales of one K block per stage.
    if constexpr (T::kProducerRegs > 0) ptx::setmaxnreg_dec<T::kProducerRegs>();
    const uint64_t w_policy = T::kSwapAB ? ptx::policy_evict_first() : 0;  // swap-AB weights only
    // A box of A: the weights under swap-AB (evict-first when the launcher asks).
    auto load_a_box = [&](uint8_t* dst, uint64_t* bar, int c0, int c1) {
      if (T::kSwapAB && p.w_evict_first) ptx::tma_load_2d_hint(dst, &tmap_a, bar, c0, c1, w_policy);
      else ptx::tma_load_2d(dst, &tmap_a, bar, c0, c1);
    };
    auto load_a = [&](const Tile& t, int stage, int kb, uint64_t* bar) {
      if constexpr (T::kGated) {
        // kGateRows gate rows (features f0 ..) and the up rows of the same features; grouped,
        // of the tile's expert (its [gate; up] rows start at row expert * n).
        const int base = kGrouped ? t.expert * p.n : 0;
        const int f0 = (t.row0 - base) / 2;
        load_a_box(ring.a(stage), bar, kb * kBlockK, base + f0);
        load_a_box(ring.a(stage) + T::kGateRows * kBlockK, bar, kb * kBlockK, base + p.n / 2 + f0);
      } else {
        load_a_box(ring.a(stage), bar, kb * kBlockK, t.row0);
      }
    };
    auto load_b = [&](const Tile& t, int stage, int kb) {
      ptx::tma_load_2d(ring.b(stage), &tmap_b, ring.full(stage), kb * kBlockK, t.col0);
    };
    // The weight operand is A under swap-AB, B otherwise; the other one and the activation
    // scales come from the previous kernel.
    auto load_w = [&](const Tile& t, int stage, int kb) {
      if constexpr (T::kSwapAB) load_a(t, stage, kb, ring.full(stage)); else load_b(t, stage, kb);
    };
    auto load_act = [&](const Tile& t, int stage, int kb) {
      if constexpr (T::kSwapAB) load_b(t, stage, kb); else load_a(t, stage, kb, ring.full(stage));
      if constexpr (kGrouped) {
        // Masked: expert e's scales are the [kb][pad4(max_m)] block of rows e * kb_total .. of a
        // map whose inner extent is max_m (tokens past it read as 0); contiguous: the dense map.
        // From the 16-byte boundary at or below the first token (grouped_scale_tok).
        const int me = p.group.max_m, tok = grouped_scale_tok<T>(t, me);
        ptx::tma_load_2d(ring.scales(stage), &tmap_sa, ring.full(stage), tok & ~(kGroupedScalePad - 1),
                         me > 0 ? t.expert * p.kb_total + kb : kb);
      } else {
        ptx::tma_load_2d(ring.scales(stage), &tmap_sa, ring.full(stage), T::kSwapAB ? t.col0 : t.row0, kb);
      }
    };
    // Paced first fill (`paced`: swap-AB with p.prefill_window = W > 0): the weights of the
    // first pass through the ring are loaded by a second thread under the "weights landed"
    // barriers, with at most W stages in flight per CTA until the previous kernel is done
    // (thread 0 arrives on "released" once past griddepcontrol.wait; then the rest goes out at
    // once), while thread 0 loads the activations. Unpaced, every CTA's whole ring is requested
    // at once and the small kernel running meanwhile queues its loads behind that burst (decode
    // trace); paced to the end, CTAs that start after the previous kernel (a second wave) fill
    // their rings slowly (the gate/up GEMM's tail grew by 3.7 µs).
    if constexpr (T::kSwapAB) {
      if (paced && tid_wg == 32) {
        Tile t;
        if (sched.next(t)) {
          const int pre = min(T::kStages, t.kb1 - t.kb0);
          bool free_run = false;
          for (int i = 0; i < pre; ++i) {
            if (i >= p.prefill_window && !free_run) {
              while (!ptx::mbarrier_test_wait(ring.wfull(i - p.prefill_window), 0)) {
                if (ptx::mbarrier_test_wait(ring.released(), 0)) {
                  free_run = true;
                  break;
                }
              }
            }
            ptx::mbarrier_arrive_expect_tx(ring.wfull(i), Ring::kABytes);
            load_a(t, i, t.kb0 + i, ring.wfull(i));
          }
        }
      }
    }
    // kIssuers > 1: thread 32 * j issues the loads of every stage load g (counted over the
    // CTA's tiles) with g % kIssuers == j; the first tile's pre-wait fill stays on thread 0.
    static_assert(T::kIssuers >= 1 && T::kIssuers <= 4 && (T::kIssuers == 1 || !T::kSwapAB),
                  "several TMA issuers: tokens-on-M schedules");
    if (tid_wg % 32 == 0 && tid_wg / 32 < T::kIssuers) {
      const int me = tid_wg / 32;
      RingState<T::kStages> st;
      bool waited = false;
      int g = 0;  // stage loads so far (every issuer counts all of them)
      bool probe_tile = true;  // FP8GEMM_TRACE_STAGES: the CTA's first tile only
      while (sched.next(tile)) {
        int kb = tile.kb0;
        if (!waited && me > 0) {
          const int pre = min(T::kStages, tile.kb1 - tile.kb0);  // thread 0's pre-wait fill
          for (int i = 0; i < pre; ++i) st.advance();
          g += pre;
          kb += pre;
          ptx::griddep_wait();
          waited = true;
        }
        if (!waited) {
          const int pre = min(T::kStages, tile.kb1 - tile.kb0);
          g += pre;
          if (paced) {
            // The weights of stages 0 .. pre-1 come from thread 32 (wfull barriers).
            ptx::griddep_wait();
            if constexpr (T::kSwapAB) ptx::mbarrier_arrive(ring.released());
            waited = true;
            for (int i = 0; i < pre; ++i) {
              ptx::mbarrier_arrive_expect_tx(ring.full(st.stage), kStageTx - Ring::kABytes);
              load_act(tile, st.stage, kb + i);
              st.advance();
            }
          } else {
            // First tile: fill the ring with weight tiles while the previous kernel finishes
            // (at decode sizes the weights are nearly all the bytes), then add the activations.
            RingState<T::kStages> w_st = st;
            for (int i = 0; i < pre; ++i) {
              ptx::mbarrier_wait(ring.empty(w_st.stage), w_st.phase ^ 1);
              FP8GEMM_STAGE_MARK(prod, i, 0, true);  // weights issued
              ptx::mbarrier_arrive_expect_tx(ring.full(w_st.stage), kStageTx);
              load_w(tile, w_st.stage, kb + i);
              w_st.advance();
            }
            ptx::griddep_wait();
            waited = true;
            for (int i = 0; i < pre; ++i) {
              FP8GEMM_STAGE_MARK(prod, i, 1, true);  // activations issued: the stage is complete
              load_act(tile, st.stage, kb + i);
              st.advance();
            }
          }
          kb += pre;
        }
        for (; kb < tile.kb1; ++kb, ++g) {
          if (T::kIssuers == 1 || g % T::kIssuers == me) {
            FP8GEMM_STAGE_MARK(prod, kb - tile.kb0, 0, probe_tile);
            ptx::mbarrier_wait(ring.empty(st.stage), st.phase ^ 1);
            FP8GEMM_STAGE_MARK(prod, kb - tile.kb0, 1, probe_tile);
            ptx::mbarrier_arrive_expect_tx(ring.full(st.stage), kStageTx);
            load_w(tile, st.stage, kb);
            load_act(tile, st.stage, kb);
          }
          st.advance();
        }
        probe_tile = false;
      }
      if (!waited) ptx::griddep_wait();
      ptx::griddep_launch_dependents();
    }
    if constexpr (kGrouped && !T::kGated) {
      // The warps with no loads to issue write the zeros of the rows past the counts meanwhile.
      constexpr int kFillers = 128 - 32 * T::kIssuers;
      if (tid_wg >= 32 * T::kIssuers) {
        ptx::griddep_wait();  // the counts are the previous kernel's; it may still read y
        grouped_zero_fill(p.group, p.m, p.n, y,
                          static_cast<int64_t>(blockIdx.x) * kFillers + (tid_wg - 32 * T::kIssuers),
                          static_cast<int64_t>(gridDim.x) * kFillers);
      }
    }
    if constexpr (T::kStreamK) {
      // Warp 2 (no loads to issue) raises the flag of the CTA's published partial, if any.
      if (tid_wg / 32 == 2) streamk_publish(typename T::Scheduler(p.shape), partial, kStreamKPublishBar);
    }
    if constexpr (kPushSum) ptx::cluster_wait();  // the math warpgroups' wait before pushing
    // Match the math warpgroups' epilogue barriers ("published", "done reading").
#pragma unroll
    for (int i = 0; i < kEpilogueClusterSyncs; ++i) ptx::cluster_sync();
    return;
  }

  // ---- Math warp-groups: wgmma per K block, promote with scales, store.
  if constexpr (T::kMathRegs > 0) ptx::setmaxnreg_inc<T::kMathRegs>();
  // No griddepcontrol.wait yet: until the epilogue these warps read only shared memory (filled
  // by the producer, which waits before loading activations) and the weight scales sw, which no
  // kernel writes: the first tile's scales load while the previous kernel finishes, not after
  // (an HBM round trip, the weights' scales having long left L2, on every CTA's first MMA).
  const int warp = tid_wg / 32, lane = threadIdx.x % 32;
  const int r_in = warp * 16 + lane / 4;  // fragment row within an m64 wave (and +8)
  const int c_in = (lane % 4) * 2;        // fragment column within each n8 group (and +1)

  float acc[T::kWaves][kAcc];
  RingState<T::kStages> st;

  // Weight scales of a tile (contiguous rows of sw) into shared memory, synchronously or by
  // cp.async (rows past the last scale block read as 0).
  auto fill_sw = [&](const Tile& t, float* dst, bool async) {
    const int n_kb = t.kb1 - t.kb0;
    const int row0 = (T::kSwapAB ? t.row0 : t.col0) / 128;
    for (int i = threadIdx.x; i < kSwRows * n_kb; i += kMathThreads) {
      const int r = i / n_kb, j = i - r * n_kb;
      // Gated: row 0 = the gate rows' block, row 1 = the up rows' block (n / 2 further on;
      // grouped, from the expert's first row).
      const int g_base = kGrouped ? t.expert * p.n : 0;
      const int nb = T::kGated ? (g_base + r * (p.n / 2) + (t.row0 - g_base) / 2) / 128 : row0 + r;
      const float* src = sw + static_cast<int64_t>(nb) * p.kb_total + t.kb0 + j;
      if (nb >= p.nb_total) dst[i] = 0.f;
      else if (async) ptx::cp_async_4(dst + i, src);
      else dst[i] = *src;
    }
  };
  // kPrefetchScales: two cache buffers by tile parity; the next tile's scales are copied during
  // this tile's main loop, so only the first tile waits for global loads before its first MMA.
  constexpr bool kSwPrefetch = T::kPrefetchScales;
  static_assert(!kSwPrefetch || T::kPersistent, "scale prefetch: persistent schedules only");
  int sw_parity = 0;
  bool first_tile = true;
  bool math_waited = false;
  bool first_pass = true;  // the first tile's first pass through the ring

  while (sched.next(tile)) {
    FP8GEMM_TRACE_TILE_BEGIN(T::kPersistent || T::kStreamK);
    const int nkb = tile.kb1 - tile.kb0;
    float* sw_tile = sw_cache;
    if constexpr (kSwPrefetch) {
      sw_tile = sw_cache + sw_parity * kSwRows * p.shape.kb_per_split;
      if (first_tile) fill_sw(tile, sw_tile, false);
      else ptx::cp_async_wait_all();
      // This tile's scales are in; the tile that last read the other buffer is done with it.
      ptx::named_barrier_sync(1, kMathThreads);
      auto peek = sched;
      Tile next_tile;
      if (peek.next(next_tile)) {
        fill_sw(next_tile, sw_cache + (sw_parity ^ 1) * kSwRows * p.shape.kb_per_split, true);
        ptx::cp_async_commit();
      }
      sw_parity ^= 1;
      first_tile = false;
    } else {
      ptx::named_barrier_sync(1, kMathThreads);  // previous tile done reading the cache
      fill_sw(tile, sw_cache, false);
      ptx::named_barrier_sync(1, kMathThreads);
    }

#pragma unroll
    for (int w = 0; w < T::kWaves; ++w)
#pragma unroll
      for (int i = 0; i < kAcc; ++i) acc[w][i] = 0.f;

    // Grouped: the tile's scales start this many tokens into the stage's scale box.
    int sa_off = 0;
    if constexpr (kGrouped) sa_off = grouped_scale_tok<T>(tile, p.group.max_m) & (kGroupedScalePad - 1);
    if constexpr (kXPromote) {
      consume_tile_xpromote<T::TN>(ring, st, sw_tile, nkb, acc[0], wg * 64 * kBlockK, wg * 64 + r_in + sa_off,
                                   first_pass && tid_wg == 0 && wg == 0, FP8GEMM_TRACE_MARK_PTR(2));
    } else {
      // Per K block the warpgroup's work is cut into units. With kSplitN (one wave, TN >= 16) a
      // unit is an N half h: the two units are in flight in the two halves of the block
      // accumulator; unit 0 is promoted while unit 1 runs. All in-flight state stays inside one
      // iteration (the overlap across K blocks is mainloop_xpromote.cuh's unrolled loop).
      // Without kSplitN a unit is one full-width wave, issued, waited for and promoted in turn
      // (full-N wgmma is faster on the tensor cores for big tiles; the two math warpgroups wait
      // on the same stage, so their promotions coincide).
      static_assert(!T::kSplitN || (T::kWaves == 1 && T::TN >= 16), "N halves: one wave, TN >= 16");
      constexpr bool kHalves = T::kSplitN;
      constexpr bool kPipe = kHalves;  // two units in flight
      constexpr int kUnitN = kHalves ? T::TN / 2 : T::TN;
      constexpr int kPerWave = kHalves ? 2 : 1;
      constexpr int U = kPerWave * T::kWaves;
      constexpr int kUnitAcc = kUnitN / 2;  // registers of one unit
      constexpr int kUnitJ = kUnitN / 8;    // n8 groups of one unit
      using UMMA = ptx::WgmmaE4M3<kUnitN>;
      float blk[kPipe ? 2 * kUnitAcc : kAcc];  // block accumulator(s) of one K block

      for (int i = 0; i < nkb; ++i) {
        // FP8GEMM_TRACE_STAGES: thread 0 of warpgroup 0, first tile only.
        [[maybe_unused]] const bool probe = first_pass && tid_wg == 0 && wg == 0;
        FP8GEMM_STAGE_MARK(cons, i, 0, probe);
        ptx::mbarrier_wait(ring.full(st.stage), st.phase);
        FP8GEMM_STAGE_MARK(cons, i, 1, probe);
        if constexpr (T::kSwapAB) {  // paced first fill: the first pass's weights land separately
          if (paced && first_pass && i < T::kStages) ptx::mbarrier_wait(ring.wfull(st.stage), 0);
        }
        if (i == 0 && threadIdx.x == 0) FP8GEMM_TRACE_MARK(2);
        const float* sa_s = ring.scales(st.stage) + sa_off;

        // Scales of this K block, read before the stage is handed back.
        float swv[kSwRows];
#pragma unroll
        for (int r = 0; r < kSwRows; ++r) swv[r] = sw_tile[r * nkb + i];
        float row_s[T::kWaves][2];                   // normal: token scales of my two rows
        // swap-AB: token scales of my columns times the wave's weight scale
        float col_s[T::kSwapAB ? T::kWaves : 1][T::kSwapAB ? T::TN / 8 : 1][2];
        if constexpr (!T::kSwapAB) {
#pragma unroll
          for (int w = 0; w < T::kWaves; ++w) {
            const int r = (wg * T::kWaves + w) * 64 + r_in;
            row_s[w][0] = sa_s[r];
            row_s[w][1] = sa_s[r + 8];
          }
        } else {
#pragma unroll
          for (int w = 0; w < T::kWaves; ++w)
#pragma unroll
            for (int j = 0; j < T::TN / 8; ++j) {
              // Gated: the gate rows' waves (the first half) take the gate rows' block scale, the
              // up rows' waves the up rows'.
              float sc = swv[0];
              if constexpr (T::kGated) sc = w >= T::kWaves / 2 ? swv[1] : swv[0];
              col_s[w][j][0] = sa_s[8 * j + c_in] * sc;
              col_s[w][j][1] = sa_s[8 * j + c_in + 1] * sc;
            }
        }

        const uint32_t a_base = ptx::smem_addr(ring.a(st.stage)) + wg * T::kWaves * 64 * kBlockK;
        const uint32_t b_base = ptx::smem_addr(ring.b(st.stage));
        auto issue = [&](auto unit) {
          constexpr int u = decltype(unit)::value;
          constexpr int w = u / kPerWave, h = u % kPerWave;
          const uint64_t da = ptx::make_smem_desc_k128_sw128(a_base + w * 64 * kBlockK);
          const uint64_t db = ptx::make_smem_desc_k128_sw128(b_base + h * kUnitN * kBlockK);
          issue_kblock_mma<UMMA>(da, db, blk + (kPipe ? (u % 2) * kUnitAcc : 0));
        };
        auto promote = [&](auto unit) {
          constexpr int u = decltype(unit)::value;
          constexpr int w = u / kPerWave, h = u % kPerWave;
          float* d = blk + (kPipe ? (u % 2) * kUnitAcc : 0);
#pragma unroll
          for (int x = 0; x < kUnitAcc; ++x) ptx::fence_operand(d[x]);
#pragma unroll
          for (int jj = 0; jj < kUnitJ; ++jj) {
            const int j = h * kUnitJ + jj;  // n8 group within the tile
            float* a = acc[w] + 4 * j;
            const float* b = d + 4 * jj;
            if constexpr (!T::kSwapAB) {
              const float sc = swv[(j * 8) / 128];
              const float f0 = row_s[w][0] * sc, f1 = row_s[w][1] * sc;
              a[0] += b[0] * f0;
              a[1] += b[1] * f0;
              a[2] += b[2] * f1;
              a[3] += b[3] * f1;
            } else {
              a[0] += b[0] * col_s[w][j][0];
              a[1] += b[1] * col_s[w][j][1];
              a[2] += b[2] * col_s[w][j][0];
              a[3] += b[3] * col_s[w][j][1];
            }
          }
        };

        // All units done: the stage is free.
        auto release = [&]() {
          FP8GEMM_STAGE_MARK(cons, i, 2, probe);
          release_stage(ring, st.stage, lane);
        };
        // Unit u is promoted right after its wait; pipelined, unit u+1 is already running.
        auto step = [&](auto unit) {
          constexpr int u = decltype(unit)::value;
          if constexpr (!kPipe) issue(unit);
          if constexpr (kPipe && u + 1 < U) ptx::wgmma_wait<1>(); else ptx::wgmma_wait<0>();
          if constexpr (u + 1 == U) release();
          promote(unit);
          if constexpr (kPipe && u + 2 < U) issue(std::integral_constant<int, u + 2>{});
        };
        if constexpr (kPipe) {
          issue(std::integral_constant<int, 0>{});
          if constexpr (U > 1) issue(std::integral_constant<int, 1>{});
        }
        step(std::integral_constant<int, 0>{});
        if constexpr (U > 1) step(std::integral_constant<int, 1>{});
        if constexpr (U > 2) step(std::integral_constant<int, 2>{});
        if constexpr (U > 3) step(std::integral_constant<int, 3>{});
        static_assert(U <= 4, "at most 4 units (the gated tile's waves)");
        FP8GEMM_STAGE_MARK(cons, i, 3, probe);
        st.advance();
      }
    }

    first_pass = false;
    if (threadIdx.x == 0) FP8GEMM_TRACE_MARK(3);
    if (!math_waited) {  // once per CTA (a persistent CTA's later tiles need neither)
      // The next kernel (split-K reduce, next layer) may start its prologue once all CTAs are here.
      ptx::griddep_launch_dependents();
      // Before writing y / partials / the workspace, which the previous kernel may still read.
      // (The producer's wait has long returned by now: this one only makes it formal.)
      ptx::griddep_wait();
      math_waited = true;
    }
    if (threadIdx.x == 0) FP8GEMM_TRACE_MARK(1);
    // Persistent split tail (persistent tiles: bf16 out, rows owned per warpgroup): a unit of a
    // tile's K range other than the last publishes its partial sums and has no output; the last
    // range's unit adds them and stores the tile.
    if constexpr (T::kPersistent) {
      if (tile.tail >= 0) {
        const bool store =
            tail_fixup<T::kMathWG>(acc, partial, tile.tail, tile.split, p.shape.tail_splits, wg, tid_wg, 2 + wg);
        FP8GEMM_TRACE_TILE_FIX();
        if (!store) {
          FP8GEMM_TRACE_TILE_END(nkb, 1);
          continue;
        }
      }
    }
    // Stream-K: a CTA holding part of a tile's K blocks publishes them, the one holding the
    // last adds the others' and stores the tile.
    if constexpr (T::kStreamK) {
      static_assert(T::kMathWG == 1 && kMode == kOutBf16, "stream-K: one math warpgroup, bf16 out");
      FP8GEMM_TRACE_TILE_FIX();  // (stream-K records: past the wait, before the fix-up)
      if (tile.tail >= 0 && !streamk_fixup(acc, partial, tile, p.shape, tid_wg, 2, kStreamKPublishBar)) {
        FP8GEMM_TRACE_TILE_END(nkb, 1);
        continue;
      }
    }
    // Epilogue: every in-bounds element of the tile is written (zeros for an empty K split).
    if constexpr (kPushSum) {
      // Rank 0 owns columns [0, TN/2) of the tile (accumulator registers x < kAcc/2: the n8
      // groups j < TN/16), rank 1 the rest. Push the peer's half into its inbox, thread-minor;
      // after the barrier add the peer's values to mine: rank 0 computes acc0 + acc1, rank 1
      // acc1 + acc0 (the same bits), each stores its half.
      static_assert(kAcc % 8 == 0, "2-CTA split-K: whole n8 groups per half");
      constexpr int kHalf = kAcc / 2;
      constexpr int kPub = kMathThreads;  // threads holding the tile (one warpgroup)
      static_assert(T::kWaves * kHalf * kPub * 4 == cluster_inbox_bytes<T>(), "inbox size");
      const int t = threadIdx.x;
      const uint32_t rank = ptx::cluster_ctarank();
      auto finish = [&](auto rank_c) {
        constexpr int r = decltype(rank_c)::value;
        constexpr int mine = r * kHalf, theirs = (1 - r) * kHalf;  // register offsets
        ptx::cluster_wait();  // the peer CTA has started (arrived at its entry)
        const uint32_t remote = ptx::map_shared_to_rank(ring.inbox(), 1 - r);
#pragma unroll
        for (int w = 0; w < T::kWaves; ++w)
#pragma unroll
          for (int x = 0; x < kHalf; ++x)
            ptx::st_shared_cluster_f32(remote + 4u * ((w * kHalf + x) * kPub + t), acc[w][theirs + x]);
        ptx::cluster_sync();  // both halves pushed and visible
        const float* in = ring.inbox();
#pragma unroll
        for (int w = 0; w < T::kWaves; ++w) {
#pragma unroll
          for (int x = 0; x < kHalf; ++x) acc[w][mine + x] += in[(w * kHalf + x) * kPub + t];
          const int row0 = tile.row0 + (wg * T::kWaves + w) * 64;
          store_fragment<T::TN / 2, T::kSwapAB, false>(acc[w] + mine, row0, tile.col0 + r * (T::TN / 2),
                                                     p.m, p.n, y, partial, 0);
        }
      };
      if (rank == 0) finish(std::integral_constant<int, 0>{});
      else finish(std::integral_constant<int, 1>{});
    } else if constexpr (kMode == kOutClusterSum) {
      static_assert(!T::kPersistent, "cluster split-K: one tile per CTA");
      static_assert(T::kWaves * kAcc * kMathThreads * 4 <= Ring::kRingBytes, "partials fit the ring");
      // The ring is idle once every math warpgroup is past its last wgmma (with two, one may
      // still be reading its last stage's A tile, which the partials below overwrite: found by
      // racecheck as NaN outputs of the 128-row schedule at split 2). Then publish my
      // accumulators there, thread-minor.
      if constexpr (T::kMathWG > 1) ptx::named_barrier_sync(1, kMathThreads);
      float* red = reinterpret_cast<float*>(ring.a(0));
      const int t = threadIdx.x;
#pragma unroll
      for (int w = 0; w < T::kWaves; ++w)
#pragma unroll
        for (int x = 0; x < kAcc; ++x) red[(w * kAcc + x) * kMathThreads + t] = acc[w][x];
      ptx::cluster_sync();  // partials published
      const uint32_t rank = ptx::cluster_ctarank();
      // Tokens-on-M tiles split the sum (S = 2, launch.cuh): rank r adds column half r (its
      // registers [r kAcc/2, (r+1) kAcc/2): whole n8 groups) of both ranks' partials — the
      // bits of rank 0 summing the whole tile (a two-term add commutes) — and stores it: each reads
      // half a tile from its peer instead of rank 0 reading all of it (128x4096^2, 128 x 128
      // tiles split 2: 9.6 vs 11.8 us). Swap-AB tiles (8-token halves are not whole n8 groups
      // at TN = 8) keep rank 0's sum.
      if constexpr (!T::kSwapAB && T::TN % 16 == 0) {
        auto half = [&](auto r_c) {
          constexpr int r = decltype(r_c)::value, kHalf = kAcc / 2, x0 = r * kHalf;
          const uint32_t peer = ptx::map_shared_to_rank(red, 1 - r);
#pragma unroll
          for (int w = 0; w < T::kWaves; ++w) {
            float sum[kHalf];
#pragma unroll
            for (int x = 0; x < kHalf; ++x) {
              const float theirs = ptx::ld_shared_cluster_f32(peer + 4u * ((w * kAcc + x0 + x) * kMathThreads + t));
              sum[x] = acc[w][x0 + x] + theirs;
            }
            const int row0 = tile.row0 + (wg * T::kWaves + w) * 64;
            store_fragment<T::TN / 2, false, false>(sum, row0, tile.col0 + r * (T::TN / 2), p.m, p.n, y, partial, 0);
          }
        };
        if (rank == 0) half(std::integral_constant<int, 0>{});
        else half(std::integral_constant<int, 1>{});
      } else if (rank == 0) {
        for (uint32_t r = 1; r < gridDim.y; ++r) {  // fixed order: deterministic
          const uint32_t base = ptx::map_shared_to_rank(red, r);
#pragma unroll
          for (int w = 0; w < T::kWaves; ++w)
#pragma unroll
            for (int x = 0; x < kAcc; ++x)
              acc[w][x] += ptx::ld_shared_cluster_f32(base + 4u * ((w * kAcc + x) * kMathThreads + t));
        }
#pragma unroll
        for (int w = 0; w < T::kWaves; ++w) {
          const int row0 = tile.row0 + (wg * T::kWaves + w) * 64;
          store_fragment<T::TN, T::kSwapAB, false>(acc[w], row0, tile.col0, p.m, p.n, y, partial, 0);
        }
      }
      ptx::cluster_sync();  // every rank done reading its peers
    } else if constexpr (kMode == kOutSwiGluQuant && kGrouped) {
      // The tile's tokens of its expert: q rows col0 .. (row stride n / 2), the 128-feature
      // group's scales in the expert's block (masked: [kb][pad4(max_m)] per expert; contiguous:
      // the dense [kb][pad4(rows)]). Scratch after the scale cache: the producer is already
      // filling the ring with the next tile.
      const int inter = p.n / 2, me = p.group.max_m;
      const int f0 = (tile.row0 - tile.expert * p.n) / 2;
      const int m_tile = min(T::TN, tile.tok_end - tile.col0);
      const int64_t pad = ((me > 0 ? me : p.m) + 3) / 4 * 4;
      const int64_t group = (me > 0 ? static_cast<int64_t>(tile.expert) * (inter / 128) : 0) + f0 / 128;
      float* sa_group = p.sa_out + group * pad + (tile.col0 - (me > 0 ? tile.expert * me : 0));
      swiglu_quant_tile<T::TN>(&acc[0][0], f0, m_tile, inter, sw_cache + kSwRows * p.shape.kb_per_split,
                               p.q_out + static_cast<int64_t>(tile.col0) * inter, sa_group, m_tile);
    } else if constexpr (kMode == kOutSwiGluQuant) {
      swiglu_quant_epilogue<T::TN>(&acc[0][0], tile.row0 / 2, p.m, p.n / 2,
                                   reinterpret_cast<float*>(ring.a(0)), p.q_out, p.sa_out);
    } else if constexpr (kStoreTma) {
      // Each warpgroup stages its rows and one of its threads stores them; the bulk stores run
      // while the warpgroup goes on with its next tile (rows past m / columns past n: clipped).
      constexpr int kRows = T::kWaves * 64;
      uint8_t* stage = ring.store() + wg * kRows * T::TN * 2;
      if (tid_wg == 0) ptx::tma_store_wait_read();  // our previous tile's stores left the stage
      ptx::named_barrier_sync(2 + wg, 128);
      stage_bf16_swizzled<T::TN, T::kWaves>(acc, stage);
      ptx::fence_proxy_async_shared();  // the generic-proxy writes are visible to the TMA unit
      ptx::named_barrier_sync(2 + wg, 128);
      if (tid_wg == 0) {
#pragma unroll
        for (int s = 0; s < T::TN / 64; ++s)
          ptx::tma_store_2d(&tmap_y, stage + s * kRows * 128, tile.col0 + 64 * s, tile.row0 + wg * kRows);
        ptx::tma_store_commit();
      }
    } else if constexpr (kGrouped && T::kSwapAB) {
      // Features of the tile's expert (columns of its rows of y), tokens up to its count: the
      // columns past it hold whatever its rows held (NaN included) and are not stored.
      const int f0 = tile.row0 - tile.expert * p.n;
#pragma unroll
      for (int w = 0; w < T::kWaves; ++w)
        store_fragment<T::TN, true, false>(acc[w], f0 + w * 64, tile.col0, tile.tok_end, p.n, y, partial, 0);
    } else if constexpr (kGrouped) {
      // Tokens on M: token rows up to the expert's count (rows past it: the next expert's
      // tokens, or padding), the expert's features as columns.
      const int f0 = tile.col0 - tile.expert * p.n;
#pragma unroll
      for (int w = 0; w < T::kWaves; ++w) {
        const int row0 = tile.row0 + (wg * T::kWaves + w) * 64;
        store_fragment<T::TN, false, false>(acc[w], row0, f0, tile.tok_end, p.n, y, partial, 0);
      }
    } else {
#pragma unroll
      for (int w = 0; w < T::kWaves; ++w) {
        const int row0 = tile.row0 + (wg * T::kWaves + w) * 64;
        store_fragment<T::TN, T::kSwapAB, kMode == kOutWorkspace>(acc[w], row0, tile.col0, p.m, p.n,
                                                                  y, partial, tile.split);
      }
    }
    if constexpr (T::kPersistent || T::kStreamK) FP8GEMM_TRACE_TILE_END(nkb, tile.tail >= 0 ? 2 : 0);
  }
  if constexpr (kStoreTma) {
    if (tid_wg == 0) ptx::tma_store_wait_all();  // y complete before the grid ends
  }
  FP8GEMM_TRACE_END();
}

}  // namespace fp8gemm
