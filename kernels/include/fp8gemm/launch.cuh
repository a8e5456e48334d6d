// Host-side launcher shared by the schedule translation units: builds the three tensor maps,
// sizes the grid and shared memory, raises the smem limit once per kernel and device, and
// launches on the caller's stream. Never synchronizes.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "api.h"
#include "sm90_fp8_gemm_1d2d.cuh"

namespace fp8gemm {

struct GemmArgs {
  const uint8_t* qa;
  const float* sa;
  const uint8_t* w;
  const float* sw;
  __nv_bfloat16* y;
  float* partial;   // split-K workspace (split * m * n floats) or null
  int m, n, k;
  int split;        // effective K split (>= 1, <= k / 128)
  int grid_limit;   // persistent grid size (#SMs to use)
  int device;
  size_t smem_optin;  // cudaDevAttrMaxSharedMemoryPerBlockOptin
  cudaStream_t stream;
};

// Defined in gemm.cu.
int make_tmap_2d(CUtensorMap* map, bool f32, const void* base, uint64_t inner, uint64_t outer,
                 uint64_t row_stride_bytes, uint32_t box_inner, uint32_t box_outer, bool swizzle128);
bool raise_smem_limit_once(const void* func, std::atomic<uint64_t>& done_mask, int device,
                           size_t bytes);

using RunFn = int (*)(const GemmArgs&);

struct ConfigEntry {
  int kind, block_m, block_n, stages;
  bool split_ok;
  RunFn run;
};

template <class T>
int run_sm90_fp8_gemm(const GemmArgs& a) {
  using Ring = SmemRing<T::kStages, T::TM, T::TN, (T::kSwapAB ? T::TN : T::TM)>;
  constexpr int kTokBox = T::kSwapAB ? T::TN : T::TM;
  constexpr int kWBox = T::kSwapAB ? T::TM : T::TN;
  constexpr int kSwRows = T::kSwapAB ? 1 : (T::TN > 128 ? T::TN / 128 : 1);
  const int kb_total = a.k / kBlockK;
  const uint64_t m_pad = (static_cast<uint64_t>(a.m) + 3) / 4 * 4;

  CUtensorMap t_act, t_w, t_sa;
  int st = make_tmap_2d(&t_act, false, a.qa, a.k, a.m, a.k, kBlockK, kTokBox, true);
  if (st == FP8GEMM_OK) st = make_tmap_2d(&t_w, false, a.w, a.k, a.n, a.k, kBlockK, kWBox, true);
  if (st == FP8GEMM_OK)
    st = make_tmap_2d(&t_sa, true, a.sa, a.m, kb_total, m_pad * 4, kTokBox, 1, false);
  if (st != FP8GEMM_OK) return st;

  GemmParams p;
  p.m = a.m;
  p.n = a.n;
  p.k = a.k;
  p.kb_total = kb_total;
  p.nb_total = (a.n + 127) / 128;
  const int rows = T::kSwapAB ? a.n : a.m, cols = T::kSwapAB ? a.m : a.n;
  p.shape.tiles_rows = (rows + T::TM - 1) / T::TM;
  p.shape.tiles_cols = (cols + T::TN - 1) / T::TN;
  p.shape.num_splits = a.split;
  p.shape.kb_total = kb_total;
  p.shape.kb_per_split = (kb_total + a.split - 1) / a.split;

  const int64_t tiles = static_cast<int64_t>(p.shape.tiles_rows) * p.shape.tiles_cols;
  dim3 grid;
  if (T::kPersistent) {
    if (a.split != 1) return FP8GEMM_ERR_CONFIG;
    grid = dim3(static_cast<unsigned>(tiles < a.grid_limit ? tiles : a.grid_limit), 1, 1);
  } else {
    if (tiles > 0x7fffffff) return FP8GEMM_ERR_SHAPE;
    grid = dim3(static_cast<unsigned>(tiles), a.split, 1);
  }
  const size_t smem = Ring::kFixedBytes + sizeof(float) * kSwRows * p.shape.kb_per_split;
  if (smem > a.smem_optin) return FP8GEMM_ERR_SHAPE;  // K per split too long for the scale cache

  if (a.split > 1) {
    static std::atomic<uint64_t> done{0};
    auto kern = sm90_fp8_gemm_1d2d_kernel<T, true>;
    if (!raise_smem_limit_once(reinterpret_cast<const void*>(kern), done, a.device, a.smem_optin))
      return FP8GEMM_ERR_LAUNCH;
    kern<<<grid, T::kThreads, smem, a.stream>>>(T::kSwapAB ? t_w : t_act, T::kSwapAB ? t_act : t_w,
                                                 t_sa, a.sw, a.y, a.partial, p);
  } else {
    static std::atomic<uint64_t> done{0};
    auto kern = sm90_fp8_gemm_1d2d_kernel<T, false>;
    if (!raise_smem_limit_once(reinterpret_cast<const void*>(kern), done, a.device, a.smem_optin))
      return FP8GEMM_ERR_LAUNCH;
    kern<<<grid, T::kThreads, smem, a.stream>>>(T::kSwapAB ? t_w : t_act, T::kSwapAB ? t_act : t_w,
                                                 t_sa, a.sw, a.y, a.partial, p);
  }
  return cudaGetLastError() == cudaSuccess ? FP8GEMM_OK : FP8GEMM_ERR_LAUNCH;
}

}  // namespace fp8gemm
