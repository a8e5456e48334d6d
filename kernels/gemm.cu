// The C ABI of the GEMM (api.h): argument checks, config lookup, tensor-map encoding,
// split-K workspace and reduction. Kernels live in include/fp8gemm/, instantiations in
// gemm_<schedule>.cu.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "api.h"
#include "fp8gemm/epilogue.cuh"
#include "fp8gemm/launch.cuh"
#include "fp8gemm/tail_fixup.cuh"

namespace fp8gemm {

const ConfigEntry* small_m_configs(int* count);
const ConfigEntry* swap_ab_configs(int* count);
const ConfigEntry* swap_ab_quant_in_configs(int* count);
const ConfigEntry* warp_specialized_configs(int* count);
const ConfigEntry* persistent_configs(int* count);
const ConfigEntry* swiglu_configs(int* count);

namespace {

// ---- cuTensorMapEncodeTiled without linking libcuda: ask the runtime for the entry point.
PFN_cuTensorMapEncodeTiled_v12000 g_encode = nullptr;
std::once_flag g_encode_once;

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  std::call_once(g_encode_once, [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      g_encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  });
  return g_encode;
}

// ---- per-device facts, queried once per device.
struct DeviceInfo {
  int major = 0, minor = 0, sms = 0;
  size_t smem_optin = 0;
};
constexpr int kMaxDevices = 64;
DeviceInfo g_dev[kMaxDevices];
std::once_flag g_dev_once[kMaxDevices];

int device_info(DeviceInfo* out, int* device) {
  int d = 0;
  if (cudaGetDevice(&d) != cudaSuccess || d < 0 || d >= kMaxDevices) return FP8GEMM_ERR_DEVICE;
  std::call_once(g_dev_once[d], [d] {
    DeviceInfo& i = g_dev[d];
    int v = 0;
    cudaDeviceGetAttribute(&i.major, cudaDevAttrComputeCapabilityMajor, d);
    cudaDeviceGetAttribute(&i.minor, cudaDevAttrComputeCapabilityMinor, d);
    cudaDeviceGetAttribute(&i.sms, cudaDevAttrMultiProcessorCount, d);
    cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, d);
    i.smem_optin = static_cast<size_t>(v);
  });
  *out = g_dev[d];
  *device = d;
  if (out->major != 9 || out->minor != 0) return FP8GEMM_ERR_DEVICE;
  return FP8GEMM_OK;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// K split for the swap-AB decode schedule when its tiles do not fill the SMs: minimises the
// busiest SM's work in K blocks, ceil(tiles*s / sms) * (ceil(kb / s) + 4), plus 6 for s >= 3
// (the reduce kernel; 2 splits reduce in a 2-CTA cluster); s <= 8, >= 4 K blocks per split,
// ties to the smaller split. src/dispatch.rs (`swap_split`) has the measurements.
int64_t swap_split(int64_t tiles, int64_t kb, int64_t sms) {
  int64_t max_s = kb / 4;
  if (max_s > 8) max_s = 8;
  if (max_s < 1) max_s = 1;
  int64_t best = 1, best_cost = INT64_MAX;
  for (int64_t s = 1; s <= max_s; ++s) {
    const int64_t cost = (tiles * s + sms - 1) / sms * ((kb + s - 1) / s + 4) + (s >= 3 ? 6 : 0);
    if (cost < best_cost) {
      best_cost = cost;
      best = s;
    }
  }
  return best;
}

// Largest K split (<= 8) keeping >= min_kb K blocks per split and at most max_ctas CTAs (one
// wave); 1 when none does.
int64_t split_for(int64_t tiles, int64_t kb, int64_t max_ctas, int64_t min_kb) {
  for (int64_t s = 8; s > 1; --s)
    if (kb >= min_kb * s && tiles * s <= max_ctas) return s;
  return 1;
}

// Stages key of the small-M 64 x 128 tile at K split `split`: 8 (the overlapped loop, split
// 1-2) or 6 (workspace splits; its loop by K range, gemm_small_m.cu). Mirrors small_m_128_stages
// in src/dispatch.rs.
int32_t small_m_128_stages(int64_t split) { return split >= 3 ? 6 : 8; }

// Rounds of a persistent grid over `tiles` tiles with a split tail, num / den = R + 1/S (R >= 1
// full rounds, a last round of L <= SMs/2 tiles in the S K ranges the kernel runs for a request
// of 4: persistent_tail), and S; false where no split tail applies. Mirrors tail_cost in
// src/dispatch.rs.
bool tail_cost(int64_t tiles, int64_t sms, int64_t kb, int64_t* num, int64_t* den, int64_t* split) {
  const int64_t full = tiles / sms, last = tiles % sms;
  if (full == 0 || 2 * last > sms) return false;
  const TailPlan plan = persistent_tail(tiles, sms, 4, static_cast<int>(kb));
  if (plan.splits < 2) return false;
  *num = full * plan.splits + 1, *den = plan.splits, *split = plan.splits;
  return true;
}

// The default configuration for a shape (FP8GEMM_KIND_AUTO); src/dispatch.rs mirrors it
// (same rule, same numbers; its doc comment has the table and the measurements behind it).
fp8gemm_config auto_config(int64_t m, int64_t n, int64_t k, int sms) {
  auto make = [](int32_t kind, int32_t bm, int32_t bn, int32_t stages, int64_t split) {
    return fp8gemm_config{kind, bm, bn, stages, static_cast<int32_t>(split), 0};
  };
  const int64_t kb = k / 128, t128 = (n + 127) / 128, m64 = (m + 63) / 64;
  if (m <= 16) {
    // Swap-AB; memory-bound: >= 1 tile per SM is not split. The 8-token tile (74 KB) runs
    // three CTAs per SM: its split also fills those slots in one wave (>= 16 K blocks each).
    const int64_t tiles = (n + 63) / 64;
    // 9-16 tokens over >= 3 waves of tiles (gate/up), or >= 1 wave with >= 32 K blocks (q|k|v):
    // stream-K, 7 stages three CTAs per SM; 8 stages two per SM from 3 waves with >= 32 K blocks
    // (src/dispatch.rs).
    if (m > 8 && (tiles >= 3 * int64_t(sms) || (tiles >= sms && kb >= 32))) {
      const bool deep = tiles >= 3 * int64_t(sms) && kb >= 32;
      return make(FP8GEMM_KIND_SWAP_AB_STREAMK, 16, 64, deep ? 8 : 7, deep ? 2 : 3);
    }
    int64_t split = tiles >= sms ? 1 : swap_split(tiles, kb, sms);
    // One partial wave of 8-token tiles (S <= tiles < 2S): split 2, a 2-CTA cluster sum. A
    // launch that follows a GEMM gets its CTAs packed 2-3 per SM on ~80 SMs; twice the CTAs
    // spread better (1x10240x5120 into: 14.8-15.1 vs 16.9-17.5 us; src/dispatch.rs).
    if (m <= 8 && tiles >= sms && tiles < 2 * int64_t(sms) && kb >= 32) split = 2;
    if (m <= 8 && tiles < sms) {
      const int64_t fill = split_for(tiles, kb, 3 * int64_t(sms), 16);
      if (fill > split) split = fill;
    }
    return make(FP8GEMM_KIND_SWAP_AB, m <= 8 ? 8 : 16, 64, 8, split);
  }
  if (m <= 128) {
    const int64_t t64 = (n + 63) / 64;
    if (m <= 64 && 2 * t64 <= sms && 4 * t64 > sms && kb >= 8)
      return make(FP8GEMM_KIND_SMALL_M, 64, 64, 8, 2);  // one wave of 64 x 64 tiles, 2-CTA sums
    if (m <= 32 && t64 >= sms)  // a wave or more of 64-row weight tiles: swap-AB 32-token tiles,
      return t64 >= 3 * int64_t(sms) ? make(FP8GEMM_KIND_SWAP_AB_STREAMK, 32, 64, 5, 3)  // stream-K from 3 waves
                                     : make(FP8GEMM_KIND_SWAP_AB, 32, 64, 8, 1);
    // 25-32 tokens, half to one wave of 64-row tiles, long K (down): swap-AB 32-token tiles in
    // a 3-way K split, 240 CTAs (src/dispatch.rs).
    if (m > 24 && m <= 32 && 2 * t64 > sms && kb >= 128)
      return make(FP8GEMM_KIND_SWAP_AB, 32, 64, 8, split_for(t64, kb, 2 * int64_t(sms), 16));
    if (m > 64 && t128 >= 40) {
      // Three or more K ranges: the persistent tile's split tail sums them in the kernel.
      const int64_t split = split_for(t128, kb, sms, 16);
      if (split >= 3) return make(FP8GEMM_KIND_PERSISTENT, 128, 128, 5, split);
      // Column tiles overflowing the SMs into a small last round: a split tail (>= 10 % saved).
      int64_t num, den, tail;
      if (tail_cost(t128, sms, kb, &num, &den, &tail) && 10 * num <= 9 * ((t128 + sms - 1) / sms) * den)
        return make(FP8GEMM_KIND_PERSISTENT, 128, 128, 5, tail);
      return make(FP8GEMM_KIND_WARP_SPEC, 128, 128, 6, split);
    }
    const int64_t split = split_for(m64 * t128, kb, sms, 4);
    return make(FP8GEMM_KIND_SMALL_M, 64, 128, small_m_128_stages(split), split);
  }
  if (m <= 256 && m64 * t128 <= sms) {
    // Four rows of 64 x 128 tiles: 128 x 128 tiles in a 2-way split tail instead.
    if (m > 192 && 2 * ((m + 127) / 128) * t128 <= sms && kb >= 2)
      return make(FP8GEMM_KIND_PERSISTENT, 128, 128, 5, 2);
    const int64_t split = split_for(m64 * t128, kb, sms, 16);
    return make(FP8GEMM_KIND_SMALL_M, 64, 128, small_m_128_stages(split), split);
  }
  // Persistent (also at M = 129-256 when 64 x 128 tiles take more than one wave): 256 x 128
  // tiles run ~8 % faster per unit of work than 128 x 128 (fewer L2 bytes per MMA), but come in
  // half as many tiles: compare rounds of tiles over the SMs.
  const int64_t rounds_big = (((m + 255) / 256) * t128 + sms - 1) / sms;
  const int64_t rounds_small = (((m + 127) / 128) * t128 + sms - 1) / sms;
  const bool big = rounds_big * 200 < rounds_small * 108;
  const int64_t plain_cost = big ? rounds_big * 200 : rounds_small * 108;
  // A split tail where the rounds model saves >= 10 % (dispatch.rs has the data); at M <= 256
  // only the 256 x 128 tile's.
  int64_t best_bm = 0, best_num = 0, best_den = 1, best_split = 1;
  const int64_t cands[2][2] = {{256, 200}, {128, 108}};
  for (const auto& c : cands) {
    int64_t num, den, split;
    if (c[0] == 128 && m <= 256) continue;
    if (!tail_cost(((m + c[0] - 1) / c[0]) * t128, sms, kb, &num, &den, &split)) continue;
    num *= c[1];
    if (best_bm == 0 || num * best_den < best_num * den) {
      best_bm = c[0], best_num = num, best_den = den, best_split = split;
    }
  }
  if (best_bm != 0 && 10 * best_num <= 9 * plain_cost * best_den)
    return make(FP8GEMM_KIND_PERSISTENT, static_cast<int32_t>(best_bm), 128, best_bm == 256 ? 3 : 5, best_split);
  return big ? make(FP8GEMM_KIND_PERSISTENT, 256, 128, 3, 1) : make(FP8GEMM_KIND_PERSISTENT, 128, 128, 5, 1);
}

// The compiled entry for a config: among the GEMMs on (qa, sa), or with `quant_in` among those
// that quantize a bf16 x themselves (their ring depth is their own: `stages` is not matched).
const ConfigEntry* find_config(const fp8gemm_config& c, bool quant_in = false) {
  using Lister = const ConfigEntry* (*)(int*);
  const Lister plain[] = {small_m_configs, swap_ab_configs, warp_specialized_configs,
                          persistent_configs};
  const Lister quantizing[] = {swap_ab_quant_in_configs};
  const Lister* lists = quant_in ? quantizing : plain;
  const int num_lists = quant_in ? 1 : 4;
  for (int li = 0; li < num_lists; ++li) {
    const Lister l = lists[li];
    int count = 0;
    const ConfigEntry* e = l(&count);
    for (int i = 0; i < count; ++i)
      if (e[i].kind == c.kind && e[i].block_m == c.block_m && e[i].block_n == c.block_n &&
          (quant_in || e[i].stages == c.stages))
        return &e[i];
  }
  return nullptr;
}

int effective_split(const fp8gemm_config& c, int64_t k) {
  int64_t s = c.split_k < 1 ? 1 : c.split_k;
  const int64_t kb = k / 128;
  if (s > kb) s = kb;
  return static_cast<int>(s < 1 ? 1 : s);
}

// The stream-K kinds (swap-AB and small-M tiles; split_k = CTAs per SM).
bool is_streamk(const ConfigEntry* e) {
  return e != nullptr && (e->kind == FP8GEMM_KIND_SWAP_AB_STREAMK || e->kind == FP8GEMM_KIND_SMALL_M_STREAMK);
}
// Persistent schedules split K only in their split tail, stream-K ones by their units; both
// sum the shares in the kernel (flags + partial tiles in a workspace of their own).
bool fixup_in_kernel(const ConfigEntry* e) {
  return e != nullptr && (e->kind == FP8GEMM_KIND_PERSISTENT || is_streamk(e));
}

// Workspace of a launch on a grid of at most `grid_limit` CTAs: split-K partials [split][m][n]
// for the reduce kernel, a persistent split tail's partial tiles and flags, or stream-K's flags
// and one partial tile per CTA of the largest grid it may launch (split = CTAs per SM).
size_t workspace_need(const ConfigEntry* e, int split, int64_t m, int64_t n, int64_t k, int grid_limit) {
  if (is_streamk(e)) {
    int64_t grid = static_cast<int64_t>(grid_limit) * split;
    if (grid > kStreamKMaxCtas) grid = kStreamKMaxCtas;
    return streamk_workspace_bytes(grid, e->block_m, e->block_n);
  }
  if (e != nullptr && e->kind == FP8GEMM_KIND_PERSISTENT) {
    const int64_t tiles = ((m + e->block_m - 1) / e->block_m) * ((n + e->block_n - 1) / e->block_n);
    return tail_workspace_bytes(persistent_tail(tiles, grid_limit, split, static_cast<int>(k / 128)),
                                e->block_m, e->block_n);
  }
  if (e == nullptr || !split_uses_workspace(split, e->cluster_split)) return 0;
  return static_cast<size_t>(split) * m * n * sizeof(float);
}

// SMs a launch of `c` may use.
int grid_limit_of(const fp8gemm_config& c, int sms) { return c.num_sms > 0 && c.num_sms < sms ? c.num_sms : sms; }

}  // namespace

int make_tmap_2d(CUtensorMap* map, bool f32, const void* base, uint64_t inner, uint64_t outer,
                 uint64_t row_stride_bytes, uint32_t box_inner, uint32_t box_outer,
                 bool swizzle128, CUtensorMapL2promotion l2_promotion) {
  return make_tmap_2d_typed(map, f32 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_UINT8,
                            base, inner, outer, row_stride_bytes, box_inner, box_outer, swizzle128,
                            l2_promotion);
}

int make_tmap_2d_typed(CUtensorMap* map, CUtensorMapDataType dtype, const void* base, uint64_t inner,
                       uint64_t outer, uint64_t row_stride_bytes, uint32_t box_inner,
                       uint32_t box_outer, bool swizzle128, CUtensorMapL2promotion l2_promotion) {
  PFN_cuTensorMapEncodeTiled_v12000 enc = encode_fn();
  if (!enc) return FP8GEMM_ERR_TMA;
  const cuuint64_t dims[2] = {inner, outer};
  const cuuint64_t strides[1] = {row_stride_bytes};
  const cuuint32_t box[2] = {box_inner, box_outer};
  const cuuint32_t estr[2] = {1, 1};
  const CUresult r =
      enc(map, dtype, 2,
          const_cast<void*>(base), dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
          swizzle128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
          l2_promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? FP8GEMM_OK : FP8GEMM_ERR_TMA;
}

bool raise_smem_limit_once(const void* func, std::atomic<uint64_t>& done_mask, int device,
                           size_t bytes) {
  const uint64_t bit = uint64_t(1) << (device & 63);
  if (done_mask.load(std::memory_order_acquire) & bit) return true;
  if (cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(bytes)) != cudaSuccess)
    return false;
  done_mask.fetch_or(bit, std::memory_order_release);
  return true;
}

}  // namespace fp8gemm

using namespace fp8gemm;

extern "C" const char* fp8gemm_status_string(int32_t status) {
  switch (status) {
    case FP8GEMM_OK: return "ok";
    case FP8GEMM_ERR_SHAPE: return "bad shape: need m >= 1, n % 16 == 0, k % 128 == 0 (and K per split small enough for the scale cache)";
    case FP8GEMM_ERR_ALIGN: return "a pointer is not 16-byte aligned";
    case FP8GEMM_ERR_CONFIG: return "this kernel configuration is not compiled in";
    case FP8GEMM_ERR_DEVICE: return "the current device is not sm_90 (Hopper)";
    case FP8GEMM_ERR_TMA: return "cuTensorMapEncodeTiled failed or is unavailable";
    case FP8GEMM_ERR_LAUNCH: return "a CUDA runtime call or kernel launch failed";
    case FP8GEMM_ERR_WORKSPACE: return "workspace missing or too small for this config";
    case FP8GEMM_ERR_DTYPE: return "unsupported dtype code";
    default: return "unknown status";
  }
}

static fp8gemm_config resolve(const fp8gemm_config* cfg, int64_t m, int64_t n, int64_t k, int sms) {
  if (cfg == nullptr || cfg->kind == FP8GEMM_KIND_AUTO) return auto_config(m, n, k, sms);
  return *cfg;
}

extern "C" size_t fp8gemm_workspace_bytes(const fp8gemm_config* cfg, int64_t m, int64_t n,
                                          int64_t k) {
  if (m < 1 || n < 1 || k < 128) return 0;
  int sms = 132;
  DeviceInfo info;
  int dev;
  if (device_info(&info, &dev) == FP8GEMM_OK) sms = info.sms;
  const fp8gemm_config c = resolve(cfg, m, n, k, sms);
  return workspace_need(find_config(c), effective_split(c, k), m, n, k, grid_limit_of(c, sms));
}

static int32_t launch_reduce(const float* partial, __nv_bfloat16* y, int64_t count, int splits,
                             int sms, cudaStream_t stream) {
  int64_t blocks = (count / 4 + 255) / 256;
  const int64_t cap = static_cast<int64_t>(sms) * 8;
  if (blocks > cap) blocks = cap;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(static_cast<unsigned>(blocks), 1, 1);
  lc.blockDim = dim3(256, 1, 1);
  lc.stream = stream;
  lc.attrs = attr;
  lc.numAttrs = 1;
  if (cudaLaunchKernelEx(&lc, splitk_reduce_kernel<256>, partial, y, count, splits) != cudaSuccess)
    return FP8GEMM_ERR_LAUNCH;
  return FP8GEMM_OK;
}

// The operand pointers' rules shared by the GEMM entry points: non-null, w (and qa / sa) 16-byte
// aligned (TMA), sw 4-byte aligned.
static bool weights_ok(const uint8_t* w, const float* sw) {
  return w && sw && aligned16(w) && (reinterpret_cast<uintptr_t>(sw) & 3) == 0;
}
static bool operands_ok(const uint8_t* qa, const float* sa, const uint8_t* w, const float* sw) {
  return qa && sa && aligned16(qa) && aligned16(sa) && weights_ok(w, sw);
}

// GemmArgs of one launch on the current device `dev` (outputs, workspace and grid limit are set
// by the caller).
static GemmArgs operand_args(const uint8_t* qa, const float* sa, const uint8_t* w,
                             const float* sw, int64_t m, int64_t n, int64_t k, int split,
                             const DeviceInfo& info, int dev, void* stream) {
  GemmArgs a{};
  a.qa = qa;
  a.sa = sa;
  a.w = w;
  a.sw = sw;
  a.m = static_cast<int>(m);
  a.n = static_cast<int>(n);
  a.k = static_cast<int>(k);
  a.split = split;
  a.grid_limit = info.sms;
  a.device = dev;
  a.smem_optin = info.smem_optin;
  a.stream = static_cast<cudaStream_t>(stream);
  return a;
}

// fp8gemm_gemm, fp8gemm_gemm_unreduced and fp8gemm_gemm_quant_in: `reduce` = false leaves
// workspace partials unreduced; `x` non-null = the bf16 activation, quantized by the kernel
// (qa, sa unused).
static int32_t gemm_impl(const uint8_t* qa, const float* sa, const __nv_bfloat16* x,
                         const uint8_t* w, const float* sw, void* y, int64_t m, int64_t n,
                         int64_t k, const fp8gemm_config* cfg, void* workspace,
                         size_t workspace_bytes, void* stream, bool reduce) {
  if (m < 1 || n < 16 || k < 128 || k % 128 != 0 || n % 16 != 0) return FP8GEMM_ERR_SHAPE;
  if (m > 0x7fffffff || n > 0x7fffffff || k > 0x7fffffff) return FP8GEMM_ERR_SHAPE;
  const bool inputs_ok = x ? aligned16(x) && weights_ok(w, sw) : operands_ok(qa, sa, w, sw);
  if (!inputs_ok || (y && !aligned16(y))) return FP8GEMM_ERR_ALIGN;
  DeviceInfo info;
  int dev = 0;
  if (int st = device_info(&info, &dev)) return st;
  const fp8gemm_config c = resolve(cfg, m, n, k, info.sms);
  const ConfigEntry* e = find_config(c, x != nullptr);
  if (!e) return FP8GEMM_ERR_CONFIG;
  const int split = effective_split(c, k);
  if (split > 1 && !e->split_ok) return FP8GEMM_ERR_CONFIG;
  const int grid_limit = grid_limit_of(c, info.sms);
  const size_t need = workspace_need(e, split, m, n, k, grid_limit);
  if (need > 0 && (workspace == nullptr || workspace_bytes < need || !aligned16(workspace)))
    return FP8GEMM_ERR_WORKSPACE;
  // y is written unless the partials are left for the caller.
  const bool partials_out = need > 0 && !fixup_in_kernel(e);
  if (y == nullptr && (reduce || !partials_out)) return FP8GEMM_ERR_ALIGN;

  GemmArgs a = operand_args(qa, sa, w, sw, m, n, k, split, info, dev, stream);
  a.x = x;
  a.y = static_cast<__nv_bfloat16*>(y);
  a.partial = need > 0 ? static_cast<float*>(workspace) : nullptr;
  a.grid_limit = grid_limit;
  if (int st = e->run(a)) return st;
  if (partials_out && reduce)  // split-K through the workspace: deterministic fixed-order reduce
    return launch_reduce(a.partial, a.y, m * n, split, info.sms, a.stream);
  return FP8GEMM_OK;
}

extern "C" int32_t fp8gemm_gemm(const uint8_t* qa, const float* sa, const uint8_t* w,
                                const float* sw, void* y, int64_t m, int64_t n, int64_t k,
                                const fp8gemm_config* cfg, void* workspace,
                                size_t workspace_bytes, void* stream) {
  return gemm_impl(qa, sa, nullptr, w, sw, y, m, n, k, cfg, workspace, workspace_bytes, stream, true);
}

extern "C" int32_t fp8gemm_gemm_unreduced(const uint8_t* qa, const float* sa, const uint8_t* w,
                                          const float* sw, void* y, int64_t m, int64_t n,
                                          int64_t k, const fp8gemm_config* cfg, void* workspace,
                                          size_t workspace_bytes, void* stream) {
  return gemm_impl(qa, sa, nullptr, w, sw, y, m, n, k, cfg, workspace, workspace_bytes, stream, false);
}

extern "C" int32_t fp8gemm_gemm_quant_in(const void* x, const uint8_t* w, const float* sw, void* y,
                                         int64_t m, int64_t n, int64_t k, const fp8gemm_config* cfg,
                                         void* workspace, size_t workspace_bytes, void* stream) {
  if (x == nullptr) return FP8GEMM_ERR_ALIGN;
  return gemm_impl(nullptr, nullptr, static_cast<const __nv_bfloat16*>(x), w, sw, y, m, n, k, cfg,
                   workspace, workspace_bytes, stream, true);
}

// Default tile of the gated (SwiGLU) schedule: at 9-16 tokens 256 weight rows (a whole
// 128-feature group per CTA, no cluster), 3 stages — faster in the decode step than the GEMM +
// fp8gemm_swiglu_quant (docs/PERF.md, session 14); at 1-8 tokens 128 rows (64 features, 2-CTA
// clusters), 4 stages, the least slow 8-token variant (sessions 6, 14). See swiglu_configs
// (gemm_swap_ab.cu) for the others.
constexpr int32_t swiglu_default_rows(int32_t tokens) { return tokens == 16 ? 256 : 128; }
constexpr int32_t swiglu_default_stages(int32_t tokens) { return tokens == 16 ? 3 : 4; }

extern "C" int32_t fp8gemm_gemm_swiglu_quant(const uint8_t* qa, const float* sa, const uint8_t* w,
                                             const float* sw, int64_t m, int64_t inter, int64_t k,
                                             int32_t tile_rows, int32_t stages, uint8_t* q,
                                             float* sa_q, void* stream) {
  if (m < 1 || m > 16 || inter < 128 || inter % 128 != 0 || k < 128 || k % 128 != 0)
    return FP8GEMM_ERR_SHAPE;
  if (inter > 0x3fffffff || k > 0x7fffffff) return FP8GEMM_ERR_SHAPE;
  if (!operands_ok(qa, sa, w, sw) || !q || !sa_q || !aligned16(q) || !aligned16(sa_q))
    return FP8GEMM_ERR_ALIGN;
  DeviceInfo info;
  int dev = 0;
  if (int st = device_info(&info, &dev)) return st;
  const int32_t tokens = m <= 8 ? 8 : 16;
  const int32_t rows = tile_rows == 0 ? swiglu_default_rows(tokens) : tile_rows;
  const int32_t depth = stages == 0 ? (tile_rows == 0 ? swiglu_default_stages(tokens) : 0) : stages;
  int count = 0;
  const ConfigEntry* list = swiglu_configs(&count);
  const ConfigEntry* e = nullptr;
  for (int i = 0; i < count; ++i)
    if (list[i].block_m == tokens && list[i].block_n == rows &&
        (list[i].stages == depth || (depth == 0 && e == nullptr)))
      e = &list[i];
  if (!e) return FP8GEMM_ERR_CONFIG;

  GemmArgs a = operand_args(qa, sa, w, sw, m, 2 * inter, k, 1, info, dev, stream);
  a.q_out = q;
  a.sa_out = sa_q;
  return e->run(a);
}

extern "C" int32_t fp8gemm_reduce_partials(const float* partials, void* y, int64_t m, int64_t n,
                                           int32_t splits, void* stream) {
  if (m < 1 || n < 16 || n % 16 != 0 || splits < 1) return FP8GEMM_ERR_SHAPE;
  if (!partials || !y || !aligned16(partials) || !aligned16(y)) return FP8GEMM_ERR_ALIGN;
  DeviceInfo info;
  int dev = 0;
  if (int st = device_info(&info, &dev)) return st;
  return launch_reduce(partials, static_cast<__nv_bfloat16*>(y), m * n, splits, info.sms,
                       static_cast<cudaStream_t>(stream));
}

extern "C" int32_t fp8gemm_auto_config(int64_t m, int64_t n, int64_t k, int32_t sms,
                                       fp8gemm_config* out) {
  if (out == nullptr) return FP8GEMM_ERR_ALIGN;
  if (m < 1 || n < 1 || k < 128) return FP8GEMM_ERR_SHAPE;
  *out = fp8gemm::auto_config(m, n, k, sms > 0 ? sms : 132);
  return FP8GEMM_OK;
}

extern "C" int32_t fp8gemm_compiled_configs(fp8gemm_config* out, int32_t capacity) {
  using namespace fp8gemm;
  using Lister = const ConfigEntry* (*)(int*);
  const Lister lists[] = {small_m_configs, swap_ab_configs, warp_specialized_configs,
                          persistent_configs};
  int32_t n = 0;
  for (Lister l : lists) {
    int count = 0;
    const ConfigEntry* e = l(&count);
    for (int i = 0; i < count; ++i, ++n)
      if (out != nullptr && n < capacity)
        out[n] = fp8gemm_config{e[i].kind, e[i].block_m, e[i].block_n, e[i].stages,
                                e[i].split_ok ? 0 : 1, 0};
  }
  return n;
}

// Timeline trace reader of this translation unit: the split-K reduce (-DFP8GEMM_TRACE only).
FP8GEMM_TRACE_READER(fp8gemm_trace_read_gemm)
