// The C ABI of the GEMM family (api.h): argument checks, config lookup, tensor-map encoding,
// split-K workspace and reduction. Kernels live in include/fp8gemm/impls/, their compiled
// configurations in gemm/<schedule>.cu. The configuration is always the caller's: the dispatch
// rule is src/dispatch.rs (`choose_config`).
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "api.h"
#include "fp8gemm/epilogue/splitk_reduce.cuh"
#include "fp8gemm/impls/grouped.cuh"
#include "fp8gemm/impls/launch.cuh"
#include "fp8gemm/scheduler/streamk_fixup.cuh"
#include "fp8gemm/scheduler/tail_fixup.cuh"

namespace fp8gemm {

// The compiled configurations of each schedule (gemm/small_m.cu, swap_ab.cu,
// warp_specialized.cu, persistent.cu) and the gated gate/up GEMM (gemm/swiglu.cu).
const ConfigEntry* small_m_configs(int* count);
const ConfigEntry* swap_ab_configs(int* count);
const ConfigEntry* warp_specialized_configs(int* count);
const ConfigEntry* persistent_configs(int* count);
int run_gemm_swiglu_quant(const GemmArgs& a);
int run_grouped_gemm(const GroupedArgs& a, int block_tokens);
int run_grouped_gemm_swiglu_quant(const GroupedArgs& a);

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

// The compiled entry for a config (stages matched exactly), or null.
const ConfigEntry* find_config(const fp8gemm_config& c) {
  using Lister = const ConfigEntry* (*)(int*);
  const Lister lists[] = {small_m_configs, swap_ab_configs, warp_specialized_configs,
                          persistent_configs};
  for (Lister l : lists) {
    int count = 0;
    const ConfigEntry* e = l(&count);
    for (int i = 0; i < count; ++i)
      if (e[i].kind == c.kind && e[i].block_m == c.block_m && e[i].block_n == c.block_n &&
          e[i].stages == c.stages)
        return &e[i];
  }
  return nullptr;
}

// K blocks of a K: the last one may be partial (K % 128 != 0: TMA zero-fills its columns past
// K, and its scales are those of the partial group).
int64_t k_blocks(int64_t k) { return (k + 127) / 128; }

int effective_split(const fp8gemm_config& c, int64_t k) {
  int64_t s = c.split_k < 1 ? 1 : c.split_k;
  const int64_t kb = k_blocks(k);
  if (s > kb) s = kb;
  return static_cast<int>(s < 1 ? 1 : s);
}

// The stream-K kind (swap-AB tiles; split_k = CTAs per SM).
bool is_streamk(const ConfigEntry* e) { return e != nullptr && e->kind == FP8GEMM_KIND_SWAP_AB_STREAMK; }
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
    return tail_workspace_bytes(persistent_tail(tiles, grid_limit, split, static_cast<int>(k_blocks(k))),
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
    case FP8GEMM_ERR_SHAPE: return "bad shape: need m >= 1, n >= 16, n % 16 == 0, k >= 16, k % 16 == 0 (and K per split small enough for the scale cache)";
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

extern "C" size_t fp8gemm_workspace_bytes(const fp8gemm_config* cfg, int64_t m, int64_t n,
                                          int64_t k) {
  if (cfg == nullptr || m < 1 || n < 1 || k < 16 || k % 16 != 0) return 0;
  int sms = 132;
  DeviceInfo info;
  int dev;
  if (device_info(&info, &dev) == FP8GEMM_OK) sms = info.sms;
  const fp8gemm_config& c = *cfg;
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

// fp8gemm_gemm and fp8gemm_gemm_unreduced: `reduce` = false leaves workspace partials
// unreduced.
static int32_t gemm_impl(const uint8_t* qa, const float* sa, const uint8_t* w, const float* sw,
                         void* y, int64_t m, int64_t n, int64_t k, const fp8gemm_config* cfg,
                         void* workspace, size_t workspace_bytes, void* stream, bool reduce) {
  if (cfg == nullptr) return FP8GEMM_ERR_CONFIG;
  // k % 16: the TMA row stride of qa and w (16-byte multiples); the last K block may be partial.
  if (m < 1 || n < 16 || k < 16 || k % 16 != 0 || n % 16 != 0) return FP8GEMM_ERR_SHAPE;
  if (m > 0x7fffffff || n > 0x7fffffff || k > 0x7fffffff) return FP8GEMM_ERR_SHAPE;
  if (!operands_ok(qa, sa, w, sw) || (y && !aligned16(y))) return FP8GEMM_ERR_ALIGN;
  DeviceInfo info;
  int dev = 0;
  if (int st = device_info(&info, &dev)) return st;
  const fp8gemm_config& c = *cfg;
  const ConfigEntry* e = find_config(c);
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
  return gemm_impl(qa, sa, w, sw, y, m, n, k, cfg, workspace, workspace_bytes, stream, true);
}

extern "C" int32_t fp8gemm_gemm_unreduced(const uint8_t* qa, const float* sa, const uint8_t* w,
                                          const float* sw, void* y, int64_t m, int64_t n,
                                          int64_t k, const fp8gemm_config* cfg, void* workspace,
                                          size_t workspace_bytes, void* stream) {
  return gemm_impl(qa, sa, w, sw, y, m, n, k, cfg, workspace, workspace_bytes, stream, false);
}

extern "C" int32_t fp8gemm_gemm_swiglu_quant(const uint8_t* qa, const float* sa, const uint8_t* w,
                                             const float* sw, int64_t m, int64_t inter, int64_t k,
                                             uint8_t* q, float* sa_q, void* stream) {
  if (m < 1 || m > 16 || inter < 128 || inter % 128 != 0 || k < 16 || k % 16 != 0)
    return FP8GEMM_ERR_SHAPE;
  if (inter > 0x3fffffff || k > 0x7fffffff) return FP8GEMM_ERR_SHAPE;
  if (!operands_ok(qa, sa, w, sw) || !q || !sa_q || !aligned16(q) || !aligned16(sa_q))
    return FP8GEMM_ERR_ALIGN;
  DeviceInfo info;
  int dev = 0;
  if (int st = device_info(&info, &dev)) return st;
  GemmArgs a = operand_args(qa, sa, w, sw, m, 2 * inter, k, 1, info, dev, stream);
  a.q_out = q;
  a.sa_out = sa_q;
  return run_gemm_swiglu_quant(a);
}

// The argument checks and GroupedArgs of the grouped entry points (outputs set by the caller).
static int32_t grouped_args(const uint8_t* qa, const float* sa, const uint8_t* w, const float* sw,
                            const uint32_t* counts, int64_t groups, int64_t max_m, int64_t rows,
                            int64_t n, int64_t k, void* stream, GroupedArgs* out) {
  if (groups < 1 || n < 128 || n % 128 != 0 || k < 16 || k % 16 != 0 || max_m < 0 || rows < 1)
    return FP8GEMM_ERR_SHAPE;
  if (max_m > 0 && rows != groups * max_m) return FP8GEMM_ERR_SHAPE;
  if (groups * n > 0x7fffffff || rows > 0x7fffffff || k > 0x7fffffff) return FP8GEMM_ERR_SHAPE;
  if (!operands_ok(qa, sa, w, sw) || !counts || (reinterpret_cast<uintptr_t>(counts) & 3) != 0)
    return FP8GEMM_ERR_ALIGN;
  DeviceInfo info;
  int dev = 0;
  if (int st = device_info(&info, &dev)) return st;
  GroupedArgs a{};
  a.qa = qa;
  a.sa = sa;
  a.w = w;
  a.sw = sw;
  a.counts = counts;
  a.groups = static_cast<int>(groups);
  a.max_m = static_cast<int>(max_m);
  a.rows = static_cast<int>(rows);
  a.n = static_cast<int>(n);
  a.k = static_cast<int>(k);
  a.sms = info.sms;
  a.device = dev;
  a.smem_optin = info.smem_optin;
  a.stream = static_cast<cudaStream_t>(stream);
  *out = a;
  return FP8GEMM_OK;
}

extern "C" int32_t fp8gemm_grouped_gemm(const uint8_t* qa, const float* sa, const uint8_t* w,
                                        const float* sw, void* y, const uint32_t* counts,
                                        int64_t groups, int64_t max_m, int64_t rows, int64_t n,
                                        int64_t k, int32_t block_tokens, void* stream) {
  GroupedArgs a;
  if (int st = grouped_args(qa, sa, w, sw, counts, groups, max_m, rows, n, k, stream, &a)) return st;
  if (!y || !aligned16(y)) return FP8GEMM_ERR_ALIGN;
  a.y = static_cast<__nv_bfloat16*>(y);
  return run_grouped_gemm(a, block_tokens);
}

extern "C" int32_t fp8gemm_grouped_gemm_swiglu_quant(const uint8_t* qa, const float* sa,
                                                     const uint8_t* w, const float* sw,
                                                     const uint32_t* counts, int64_t groups,
                                                     int64_t max_m, int64_t rows, int64_t inter,
                                                     int64_t k, uint8_t* q, float* sa_q,
                                                     void* stream) {
  if (inter < 128 || inter % 128 != 0 || inter > 0x3fffffff) return FP8GEMM_ERR_SHAPE;
  GroupedArgs a;
  if (int st = grouped_args(qa, sa, w, sw, counts, groups, max_m, rows, 2 * inter, k, stream, &a)) return st;
  if (!q || !sa_q || (reinterpret_cast<uintptr_t>(sa_q) & 3) != 0) return FP8GEMM_ERR_ALIGN;
  a.q_out = q;
  a.sa_out = sa_q;
  return run_grouped_gemm_swiglu_quant(a);
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
