// Host-side launcher shared by the schedule translation units: builds the three tensor maps,
// sizes the grid and shared memory, raises the smem limit once per kernel and device, and
// launches on the caller's stream. Never synchronizes.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "api.h"
#include "fp8gemm/impls/sm90_fp8_gemm_1d2d.cuh"
#include "fp8gemm/pipeline/ring.cuh"
#include "fp8gemm/scheduler/streamk_fixup.cuh"
#include "fp8gemm/scheduler/tail_fixup.cuh"

namespace fp8gemm {

struct GemmArgs {
  const uint8_t* qa;
  const float* sa;
  const uint8_t* w;
  const float* sw;
  __nv_bfloat16* y;
  float* partial;   // split-K workspace (split * m * n floats), a persistent split tail's, or null
  uint8_t* q_out;   // gated schedules: the SwiGLU output's (q, sa) (GemmParams::q_out)
  float* sa_out;
  int m, n, k;
  int split;        // effective K split (>= 1, <= ceil(k / 128))
  int grid_limit;   // persistent grid size (#SMs to use)
  int device;
  size_t smem_optin;  // cudaDevAttrMaxSharedMemoryPerBlockOptin
  cudaStream_t stream;
};

// Defined in gemm/gemm.cu.
// l2_promotion: how much L2 fetches around each requested line.
int make_tmap_2d_typed(CUtensorMap* map, CUtensorMapDataType dtype, const void* base, uint64_t inner,
                       uint64_t outer, uint64_t row_stride_bytes, uint32_t box_inner,
                       uint32_t box_outer, bool swizzle128,
                       CUtensorMapL2promotion l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
int make_tmap_2d(CUtensorMap* map, bool f32, const void* base, uint64_t inner, uint64_t outer,
                 uint64_t row_stride_bytes, uint32_t box_inner, uint32_t box_outer, bool swizzle128,
                 CUtensorMapL2promotion l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
bool raise_smem_limit_once(const void* func, std::atomic<uint64_t>& done_mask, int device,
                           size_t bytes);

using RunFn = int (*)(const GemmArgs&);

// Split-K with at most this many splits reduces inside a cluster (no workspace, no reduce
// kernel); more splits use the f32 workspace and splitk_reduce_kernel. 2-CTA clusters measured
// faster than the workspace; clusters of 3-8 were up to 2x slower: with one CTA per SM too few
// of them fit at once (dev/cluster_fit.cu).
constexpr int kMaxClusterSplit = 2;

// Whether a (schedule, split) pair reduces through the workspace.
inline bool split_uses_workspace(int split, bool cluster_capable) {
  return split > 1 && !(cluster_capable && split <= kMaxClusterSplit);
}

struct ConfigEntry {
  int kind, block_m, block_n, stages;
  bool split_ok;
  RunFn run;
  bool cluster_split;  // split-K may reduce inside a cluster (not persistent, not stream-K)
};

// Swap-AB (decode-size) weight loads carry an L2 evict-first policy: in a decode step the
// weights stream once (~490 MB per Qwen3-32B layer) and would otherwise evict what the small
// kernels between the GEMMs read next (residual stream, KV cache, activations). Not the gated
// gate/up tile, which measured slower with it (docs/perf.md).
constexpr bool kWeightEvictFirst = true;

// L2 promotion of the swap-AB (decode-size) tiles' weight loads: each box row is one 128-byte
// line of a K block; promoting to 256 B would also fetch the next K block's line, which an
// evict-first load (above) may lose before its own stage asks for it. 128 B measured faster
// than 256 on the decode shapes and in the decode step (docs/perf.md).
constexpr CUtensorMapL2promotion kSwapAbWeightL2Promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_128B;

// Swap-AB (decode-size) tiles pace the first fill of their ring: at most this many weight
// stages in flight per CTA until the previous kernel is done (0: the whole ring at once). The
// small kernel the GEMM overlaps then no longer queues its loads behind a ~10-28 MB burst of
// weight requests. 1 measured best in the decode step (docs/perf.md).
constexpr int kPrefillWindow = 1;

template <class T>
int run_sm90_fp8_gemm(const GemmArgs& a) {
  using Ring = RingOf<T>;
  constexpr int kTokBox = T::kSwapAB ? T::TN : T::TM;
  // Gated: the weight tile is two 128-row boxes (gate rows, up rows).
  constexpr int kWBox = T::kSwapAB ? (T::kGated ? T::TM / 2 : T::TM) : T::TN;
  constexpr int kSwRows = sw_rows_per_tile<T>();
  // K blocks, the last one partial when k % 128 != 0: the tensor maps' K extent is k, so TMA
  // fills the box columns past k with zeros (in both operands) and the block's promotion uses
  // the scales of the partial group (sa and sw have ceil(k / 128) columns).
  const int kb_total = (a.k + kBlockK - 1) / kBlockK;

  CUtensorMap t_act = {}, t_w = {}, t_sa = {}, t_y = {};
  int st = make_tmap_2d(&t_w, false, a.w, a.k, a.n, a.k, kBlockK, kWBox, true,
                        T::kSwapAB ? kSwapAbWeightL2Promotion : CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  // The activation tile (rows past m: TMA's zero fill) and its scales.
  const uint64_t m_pad = (static_cast<uint64_t>(a.m) + 3) / 4 * 4;
  if (st == FP8GEMM_OK) st = make_tmap_2d(&t_act, false, a.qa, a.k, a.m, a.k, kBlockK, kTokBox, true);
  if (st == FP8GEMM_OK) st = make_tmap_2d(&t_sa, true, a.sa, a.m, kb_total, m_pad * 4, kTokBox, 1, false);
  // TMA-store epilogue: y as [m][n] bf16, one box = a warpgroup's rows x 64 columns.
  if (st == FP8GEMM_OK && T::kTmaStore)
    st = make_tmap_2d_typed(&t_y, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, a.y, a.n, a.m, uint64_t(a.n) * 2, 64,
                            T::kWaves * 64, true);
  if (st != FP8GEMM_OK) return st;

  GemmParams p;
  p.m = a.m;
  p.n = a.n;
  p.k = a.k;
  p.kb_total = kb_total;
  p.nb_total = (a.n + 127) / 128;
  p.q_out = a.q_out;
  p.sa_out = a.sa_out;
  p.w_evict_first = T::kSwapAB && !T::kGated && kWeightEvictFirst;
  p.prefill_window = T::kSwapAB ? kPrefillWindow : 0;
  const int rows = T::kSwapAB ? a.n : a.m, cols = T::kSwapAB ? a.m : a.n;
  p.shape.tiles_rows = (rows + T::TM - 1) / T::TM;
  p.shape.tiles_cols = (cols + T::TN - 1) / T::TN;
  // Persistent schedules split K only in their split tail (a.split = the ranges requested per
  // tail tile, set below), stream-K ones by their units (a.split = CTAs per SM): every tile's
  // scales fit the cache whole.
  const int split = T::kPersistent || T::kStreamK ? 1 : a.split;
  p.shape.num_splits = split;
  p.shape.kb_total = kb_total;
  p.shape.kb_per_split = (kb_total + split - 1) / split;
  p.shape.tail_first = p.shape.tiles_rows * p.shape.tiles_cols;
  p.shape.tail_splits = 1;

  // Weight-scale cache: double-buffered when the next tile's scales are prefetched.
  const size_t smem = Ring::kFixedBytes + sizeof(float) * kSwRows * p.shape.kb_per_split * (T::kPrefetchScales ? 2 : 1);
  if (smem > a.smem_optin) return FP8GEMM_ERR_SHAPE;  // K per split too long for the scale cache

  // One kernel per (schedule, output mode); smem limit raised once per device.
  constexpr bool kClusterSplitOk = !T::kPersistent && !T::kStreamK;
  const bool use_ws = !T::kPersistent && !T::kStreamK && split_uses_workspace(a.split, kClusterSplitOk);
  int mode = split == 1 ? kOutBf16 : (use_ws ? kOutWorkspace : kOutClusterSum);
  if (use_ws && a.partial == nullptr) return FP8GEMM_ERR_WORKSPACE;
  decltype(&sm90_fp8_gemm_1d2d_kernel<T, T::kGated ? kOutSwiGluQuant : kOutBf16>) kern;
  if constexpr (T::kGated) {
    // One column tile (m <= TN), no split, whole 128-feature groups.
    if (a.split != 1 || a.m > T::TN || a.n % 256 != 0 || !a.q_out || !a.sa_out)
      return FP8GEMM_ERR_CONFIG;
    mode = kOutSwiGluQuant;
    kern = sm90_fp8_gemm_1d2d_kernel<T, kOutSwiGluQuant>;
  } else if constexpr (T::kPersistent) {
    kern = sm90_fp8_gemm_1d2d_kernel<T, kOutBf16>;
  } else if constexpr (T::kStreamK) {
    if (a.partial == nullptr) return FP8GEMM_ERR_WORKSPACE;
    kern = sm90_fp8_gemm_1d2d_kernel<T, kOutBf16>;
  } else {
    kern = mode == kOutBf16 ? sm90_fp8_gemm_1d2d_kernel<T, kOutBf16>
           : mode == kOutWorkspace ? sm90_fp8_gemm_1d2d_kernel<T, kOutWorkspace>
                                   : sm90_fp8_gemm_1d2d_kernel<T, (kClusterSplitOk ? kOutClusterSum : kOutWorkspace)>;
  }
  {
    static std::atomic<uint64_t> done[4] = {{0}, {0}, {0}, {0}};
    if (!raise_smem_limit_once(reinterpret_cast<const void*>(kern), done[mode], a.device, a.smem_optin))
      return FP8GEMM_ERR_LAUNCH;
  }

  // Programmatic dependent launch: our prologue may overlap the previous kernel's tail (the
  // kernel waits with griddepcontrol.wait before touching global inputs/outputs).
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  attr[1].id = cudaLaunchAttributeClusterDimension;
  attr[1].val.clusterDim.x = 1;
  attr[1].val.clusterDim.y = mode == kOutClusterSum ? a.split : 1;
  attr[1].val.clusterDim.z = 1;
  cudaLaunchConfig_t lc = {};
  lc.blockDim = dim3(T::kThreads, 1, 1);
  lc.dynamicSmemBytes = smem;
  lc.stream = a.stream;
  lc.attrs = attr;
  // (No cluster attribute at size 1: it alone delays the kernel in a PDL chain.)
  lc.numAttrs = mode == kOutClusterSum ? 2 : 1;

  const int64_t units = static_cast<int64_t>(p.shape.tiles_rows) * p.shape.tiles_cols;
  if (T::kPersistent) {
    int64_t max_units = a.grid_limit;
    if (max_units < 1) max_units = 1;
    // Split tail: the last round's tiles in K ranges (scheduler/tail_fixup.cuh; the caller
    // sized the workspace with the same plan, fp8gemm_workspace_bytes).
    const TailPlan tail = persistent_tail(units, max_units, a.split, kb_total);
    int64_t total = units;
    if (tail.splits > 1) {
      if (a.partial == nullptr) return FP8GEMM_ERR_WORKSPACE;
      p.shape.tail_first = tail.first;
      p.shape.tail_splits = tail.splits;
      total = tail.first + static_cast<int64_t>(tail.tiles) * tail.splits;
    }
    lc.gridDim = dim3(static_cast<unsigned>(total < max_units ? total : max_units), 1, 1);
  } else if (T::kStreamK) {
    // a.split CTAs per SM, at most as many as fit at once (every CTA a storer waits for must
    // be resident, or done, before it) and as the flags page and the units allow.
    // (The scale cache makes the footprint depend on K: cached per device as smem << 8 | fit.)
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
    int64_t grid = static_cast<int64_t>(a.grid_limit) * (a.split < per_sm ? a.split : per_sm);
    const int64_t work = streamk_units(p.shape);  // (tile, K block) units
    if (grid > work) grid = work;
    if (grid > kStreamKMaxCtas) grid = kStreamKMaxCtas;
    if (grid < 1) grid = 1;
    lc.gridDim = dim3(static_cast<unsigned>(grid), 1, 1);
  } else {
    const int64_t ctas = units;
    if (ctas > 0x7fffffff) return FP8GEMM_ERR_SHAPE;
    lc.gridDim = dim3(static_cast<unsigned>(ctas), a.split, 1);
  }

  const CUtensorMap& ta = T::kSwapAB ? t_w : t_act;
  const CUtensorMap& tb = T::kSwapAB ? t_act : t_w;
  if (cudaLaunchKernelEx(&lc, kern, ta, tb, t_sa, t_y, a.sw, a.y, a.partial, p) != cudaSuccess)
    return FP8GEMM_ERR_LAUNCH;
  return cudaGetLastError() == cudaSuccess ? FP8GEMM_OK : FP8GEMM_ERR_LAUNCH;
}

}  // namespace fp8gemm
