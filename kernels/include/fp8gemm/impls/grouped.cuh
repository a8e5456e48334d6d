// Grouped (mixture-of-experts) schedules over the stacked experts, on a persistent grid of the
// grouped scheduler (scheduler/grouped_scheduler.cuh), and their host launcher:
//   GroupedSwapAB      the swap-AB decode tile (impls/swap_ab.cuh: 64 weight rows on the wgmma
//                      M side, TN tokens on N), or its gated gate/up tile;
//   GroupedPersistent  the persistent tokens-on-M tile (impls/persistent.cuh: two math
//                      warpgroups, 128 tokens x 128 weight rows) for prefill-size experts, its
//                      output stored directly (a TMA store of whole boxes would cross into the
//                      next expert's rows).
//
// One launch covers every expert: the kernel reads the per-expert counts on the device (after
// griddepcontrol.wait, so a graph can replay it with new counts), the CTAs with no unit exit,
// and the producer warpgroup's idle warps write the zeros of the rows past the counts (plain
// schedules; the gated ones leave the rows past the counts of q and sa_q as they were).
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "fp8gemm/impls/launch.cuh"
#include "fp8gemm/scheduler/grouped_scheduler.cuh"

namespace fp8gemm {

// A configuration `Cfg` names:
//   kTokens   tokens per tile (wgmma N): 8, 16, 32 or 64
//   kStages   ring depth
//   kHalves   two N halves per K block, one promoted while the other's wgmma runs
//   kGated    the gate/up tile of the SwiGLU + quantization epilogue (impls/swap_ab.cuh: 128
//             gate rows and the same features' up rows of the expert's [gate; up] weight)
template <class Cfg>
struct GroupedSwapAB {
  static_assert(!Cfg::kHalves || Cfg::kTokens >= 16, "N halves: whole n8 groups per half");
  static_assert(!Cfg::kHalves || !Cfg::kGated, "gated: four waves, no N halves");
  static constexpr int kMathWG = 1, kWaves = Cfg::kGated ? 4 : 1, TM = 64 * kWaves, TN = Cfg::kTokens,
                       kStages = Cfg::kStages;
  static constexpr int kGateRows = Cfg::kGated ? 128 : 0;
  static constexpr bool kSplitN = Cfg::kHalves;
  static constexpr int kIssuers = 1;
  static constexpr bool kSwapAB = true, kPersistent = false, kStreamK = false, kGated = Cfg::kGated;
  static constexpr bool kGrouped = true;
  static constexpr bool kTmaStore = false;
  static constexpr bool kPrefetchScales = false;
  static constexpr bool kXPromote = false;
  static constexpr int kThreads = (kMathWG + 1) * 128;
  static constexpr int kMathRegs = 0, kProducerRegs = 0;
  using Scheduler = GroupedScheduler<TM, TN>;
};

// A configuration `Cfg` names the knobs of impls/persistent.cuh's: kTileM (128 or 256), kTileN,
// kStages, kIssuers, kPrefetchScales, kXPromote.
template <class Cfg>
struct GroupedPersistent {
  static_assert(Cfg::kTileM == 128 || Cfg::kTileM == 256, "one or two m64 waves per warpgroup");
  static constexpr bool kXPromote = Cfg::kXPromote;
  static constexpr int kIssuers = Cfg::kIssuers;
  static constexpr bool kTmaStore = false;
  static constexpr bool kPrefetchScales = Cfg::kPrefetchScales;
  static constexpr int kMathWG = 2, kWaves = Cfg::kTileM / 128, TM = Cfg::kTileM, TN = Cfg::kTileN,
                       kStages = Cfg::kStages;
  static constexpr bool kSplitN = false;
  // kPersistent: several tiles per CTA (the scale prefetch); the grouped scheduler splits no
  // tile's K range (Tile.tail = -1).
  static constexpr bool kSwapAB = false, kPersistent = true, kStreamK = false, kGated = false;
  static constexpr bool kGrouped = true;
  static constexpr int kGateRows = 0;
  static constexpr int kThreads = (kMathWG + 1) * 128;
  static constexpr int kMathRegs = 232, kProducerRegs = 40;
  using Scheduler = GroupedScheduler<TM, TN, /*tokens on M*/ true>;
};

// One grouped launch. Masked (max_m > 0): qa [groups * max_m, k], sa per expert
// [kb][pad4(max_m)], y [groups * max_m, n]. Contiguous (max_m = 0): qa [rows, k], sa
// [kb][pad4(rows)], y [rows, n]. w [groups * n, k], sw [groups * n / 128][kb]. Gated schedules
// write q [rows, n / 2] and sa_q (masked: [groups][n / 256][pad4(max_m)]; contiguous:
// [n / 256][pad4(rows)]) instead of y, for the token rows below the counts only.
struct GroupedArgs {
  const uint8_t* qa;
  const float* sa;
  const uint8_t* w;
  const float* sw;
  __nv_bfloat16* y;
  uint8_t* q_out;
  float* sa_out;
  const uint32_t* counts;
  int groups, max_m, rows, n, k;
  int sms;
  int device;
  size_t smem_optin;
  cudaStream_t stream;
};

template <class T>
int run_sm90_fp8_grouped(const GroupedArgs& a) {
  using Ring = RingOf<T>;
  static_assert(IsGrouped<T>::value, "a grouped schedule");
  const int kb_total = (a.k + kBlockK - 1) / kBlockK;
  const int64_t w_rows = static_cast<int64_t>(a.groups) * a.n;
  if (w_rows > 0x7fffffff) return FP8GEMM_ERR_SHAPE;

  CUtensorMap t_act = {}, t_w = {}, t_sa = {}, t_y = {};
  // Weight rows and tokens per tile; gated, the weight tile is two 128-row boxes (gate rows, up
  // rows).
  constexpr int kWRows = T::kSwapAB ? T::TM : T::TN, kTokens = T::kSwapAB ? T::TN : T::TM;
  constexpr int kWBox = T::kGated ? kWRows / 2 : kWRows;
  int st = make_tmap_2d(&t_w, false, a.w, a.k, w_rows, a.k, kBlockK, kWBox, true,
                        T::kSwapAB ? kSwapAbWeightL2Promotion : CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  if (st == FP8GEMM_OK) st = make_tmap_2d(&t_act, false, a.qa, a.k, a.rows, a.k, kBlockK, kTokens, true);
  if (st == FP8GEMM_OK) {
    // Masked: one [kb][pad4(max_m)] block per expert, stacked: inner extent max_m (a box past it
    // reads zeros, not the next expert's scales), outer groups * kb. Contiguous: the dense map.
    const int tok = a.max_m > 0 ? a.max_m : a.rows;
    const uint64_t pad = (static_cast<uint64_t>(tok) + 3) / 4 * 4;
    const uint64_t outer = a.max_m > 0 ? static_cast<uint64_t>(a.groups) * kb_total : kb_total;
    // Boxes start on a 16-byte boundary, so they hold kGroupedScalePad more tokens
    // (scale_box_tokens, impls/sm90_fp8_gemm_1d2d.cuh).
    st = make_tmap_2d(&t_sa, true, a.sa, tok, outer, pad * 4, scale_box_tokens<T>(), 1, false);
  }
  if (st != FP8GEMM_OK) return st;

  GemmParams p = {};
  p.m = a.rows;
  p.n = a.n;
  p.k = a.k;
  p.kb_total = kb_total;
  p.nb_total = static_cast<int>(w_rows / 128);
  p.w_evict_first = T::kSwapAB && !T::kGated && kWeightEvictFirst;  // (as the dense tiles)
  p.q_out = a.q_out;
  p.sa_out = a.sa_out;
  p.prefill_window = 0;  // the first tile is known only once the counts are
  p.shape.tiles_rows = a.n / kWRows;  // weight tiles per expert
  p.shape.kb_total = kb_total;
  p.shape.kb_per_split = kb_total;
  p.shape.num_splits = 1;
  p.group.counts = a.counts;
  p.group.groups = a.groups;
  p.group.max_m = a.max_m;
  // Upper bound of the units (the counts are on the device): every expert full (masked), or
  // the rows in whole tiles plus one partial tile per expert (contiguous).
  const int64_t tok_tiles = a.max_m > 0 ? static_cast<int64_t>(a.groups) * ((a.max_m + kTokens - 1) / kTokens)
                                        : (a.rows + kTokens - 1) / kTokens + a.groups;
  const int64_t units = tok_tiles * p.shape.tiles_rows;
  if (units > 0x7fffffff) return FP8GEMM_ERR_SHAPE;  // unit ids are int
  p.shape.tiles_cols = 1;
  p.shape.tail_first = 0x7fffffff;  // (persistent tiles: no split tail)
  p.shape.tail_splits = 1;

  if (T::kGated && (a.n % 256 != 0 || !a.q_out || !a.sa_out)) return FP8GEMM_ERR_CONFIG;
  if (!T::kGated && !a.y) return FP8GEMM_ERR_CONFIG;
  // The weight-scale cache; gated, then the epilogue's scratch (6 TN floats, swiglu.cuh).
  const size_t smem = Ring::kFixedBytes + sizeof(float) * (sw_rows_per_tile<T>() * kb_total * (T::kPrefetchScales ? 2 : 1) +
                                                           (T::kGated ? 6 * T::TN : 0));
  if (smem > a.smem_optin) return FP8GEMM_ERR_SHAPE;  // K too long for the scale cache
  constexpr int kMode = T::kGated ? kOutSwiGluQuant : kOutBf16;
  auto kern = sm90_fp8_gemm_1d2d_kernel<T, kMode>;
  {
    static std::atomic<uint64_t> done{0};
    if (!raise_smem_limit_once(reinterpret_cast<const void*>(kern), done, a.device, a.smem_optin))
      return FP8GEMM_ERR_LAUNCH;
  }
  // A resident grid: as many CTAs as fit at once (cached per device with the footprint, which
  // depends on K through the scale cache), at most one per unit and never zero (the CTAs write
  // the zeros of the rows past the counts too).
  static std::atomic<uint64_t> fit[64];
  const uint64_t seen = fit[a.device & 63].load(std::memory_order_relaxed);
  int per_sm = static_cast<int>(seen & 0xff);
  if ((seen >> 8) != smem || per_sm == 0) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, T::kThreads, smem) != cudaSuccess ||
        per_sm < 1) {
      (void)cudaGetLastError();
      return FP8GEMM_ERR_LAUNCH;
    }
    fit[a.device & 63].store(static_cast<uint64_t>(smem) << 8 | static_cast<uint64_t>(per_sm & 0xff),
                             std::memory_order_relaxed);
  }
  int64_t grid = static_cast<int64_t>(a.sms) * per_sm;
  if (grid > units) grid = units;
  if (grid < 1) grid = 1;

  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(static_cast<unsigned>(grid), 1, 1);
  lc.blockDim = dim3(T::kThreads, 1, 1);
  lc.dynamicSmemBytes = smem;
  lc.stream = a.stream;
  lc.attrs = attr;
  lc.numAttrs = 1;
  // Swap-AB: the weights are the MMA's A operand, the tokens its B.
  const CUtensorMap& ta = T::kSwapAB ? t_w : t_act;
  const CUtensorMap& tb = T::kSwapAB ? t_act : t_w;
  if (cudaLaunchKernelEx(&lc, kern, ta, tb, t_sa, t_y, a.sw, a.y, static_cast<float*>(nullptr), p) != cudaSuccess) {
    (void)cudaGetLastError();
    return FP8GEMM_ERR_LAUNCH;
  }
  return FP8GEMM_OK;
}

}  // namespace fp8gemm
