// Elementwise work fused with the activation quantization (declarations: api.h).
//
// Decode runs one token per step, so each of these ops is a few microseconds of launch
// overhead around almost no work: fusing residual add + RMSNorm + quantize (and SiLU * up +
// quantize) removes two to three launches per GEMM input. Each output must be bit-identical
// to the composed path (candle 0.11's bf16 kernels, then gemm/quant.cu), so the float arithmetic
// below mirrors candle-kernels' reduce.cu `rmsnorm`, unary.cu `usilu_bf16` and binary.cu
// `badd_bf16` / `bmul_bf16` expression by expression (same nvcc, same PTX), and the
// quantization of a 128-wide group repeats gemm/quant.cu's.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "api.h"
#include "fp8gemm/common/launch_pdl.cuh"
#include "fp8gemm/common/act_quant.cuh"
#include "fp8gemm/ptx/flag.cuh"
#include "fp8gemm/common/rmsnorm.cuh"
#include "fp8gemm/common/trace.cuh"

namespace fp8gemm {

// Defined in gemm/gemm.cu.
bool raise_smem_limit_once(const void* func, std::atomic<uint64_t>& done_mask, int device,
                           size_t bytes);

namespace fused {

using ptx::griddep_launch_dependents;
using ptx::griddep_wait;

// One CTA per row, kThreads = candle's rmsnorm block size for this k (32 when k < 1024, else
// 1024), so that every thread's partial sum of squares covers the same columns in the same
// order as candle's, and the two butterfly reductions match too.
//  1. h = x (+ residual) into shared memory (16-byte vectors), and into x_sum when adding.
//  2. per-thread sum of h^2 over columns tid, tid + kThreads, ... (candle's order), reduced.
//  3. per 128-column group (one half-warp each): y = bf16(scale * h * gamma), quantized.
// The row is read from global memory once; y never leaves the SM.
// kRagged (ncols % 128 != 0, ncols % 8 == 0): the row's last group is partial; its lanes past
// ncols read and store nothing (zeros in the amax) and its scale is written as usual.
template <int kThreads, bool kRagged>
__global__ void __launch_bounds__(kThreads)
    add_rmsnorm_quant_kernel(const __nv_bfloat16* __restrict__ x,
                             const __nv_bfloat16* __restrict__ residual,
                             const __nv_bfloat16* __restrict__ gamma, const float eps,
                             __nv_bfloat16* __restrict__ x_sum, uint8_t* __restrict__ q,
                             float* __restrict__ sa, const int64_t m, const int ncols,
                             const float* __restrict__ rpart, const int splits,
                             const int x_settled) {
  // Trace marks: 1 past the PDL wait (stage_norm_row), 2 row staged, 3 scale known.
  FP8GEMM_TRACE_BEGIN(FP8GEMM_TRACE_NORM);
  // Let a PDL-launched GEMM start its weight prefetch now (triggering after our loads instead,
  // so that its burst does not queue ahead of them, measured no better).
  griddep_launch_dependents();

  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* h_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* g_s = h_s + ncols;
  __shared__ float s_sum[32];

  const int tid = threadIdx.x;
  const int64_t row = blockIdx.x;
  const int64_t base = row * ncols;
  const int nvec = ncols / 8;

  // 1. h, 8 values per step; gamma and a settled x (api.h) before the PDL wait.
  stage_norm_row<kThreads>([](int v) { return 8 * v; }, nvec, base, x, gamma, residual, rpart, splits,
                           m * ncols, x_settled != 0, x_sum, h_s, g_s, FP8GEMM_TRACE_MARK_PTR(1));
  __syncthreads();
  if (tid == 0) FP8GEMM_TRACE_MARK(2);

  // 2. candle's rmsnorm, expression by expression (reduce.cu).
  const float scale = rms_scale<kThreads, kThreads>(h_s, ncols, eps, s_sum);
  if (tid == 0) FP8GEMM_TRACE_MARK(3);

  // 3. Normalize and quantize, one 128-wide group per half-warp.
  constexpr int kWarps = kThreads / 32;
  const int lane = tid % 32, warp = tid / 32, sub = lane % 16;
  const int kb = kRagged ? (ncols + 127) / 128 : ncols / 128;
  const int64_t m_pad = (m + 3) / 4 * 4;
  for (int g0 = warp * 2; g0 < kb; g0 += kWarps * 2) {  // warp-uniform trip count
    const int g = g0 + lane / 16;
    const bool in_row = g < kb;
    const int col = (in_row ? g : 0) * 128 + sub * 8;
    // This lane's 8 columns exist (always, but in the partial last group of a ragged row).
    const bool valid = kRagged ? in_row && col < ncols : in_row;
    float v[8];
    if (valid) {
      rmsnorm8(scale, *reinterpret_cast<const uint4*>(h_s + col),
               *reinterpret_cast<const uint4*>(g_s + col), v);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = 0.f;
    }
    quantize_group(v, valid, sub, q + base + col, sa + int64_t(in_row ? g : 0) * m_pad + row);
  }
  if (row == m - 1) zero_scale_padding(sa, m, kb, tid, kThreads);  // the last row's CTA
  FP8GEMM_TRACE_END();
}

// Batch-1 variant: one row over kSplitCtas CTAs of 128 threads. At batch 1 the one-CTA kernel
// above pulls x and the split-K partials (~90 KB at k = 5120) through one SM while the next
// GEMM's early CTAs fill their rings (measured: the norm before gate_up ran 8.5 µs on the decode
// step's critical path, the one before q|k|v 6 µs). CTA c plays virtual warps
// 4c .. 4c+3 of candle's 1024-thread rmsnorm, i.e. the 128-column chunks c, c + 8, c + 16, ...:
// it sums its warps' squares exactly as candle's block does, publishes the 4 warp sums to
// `bar`, and once all kSplitCtas CTAs of the row have arrived, every CTA runs candle's 32-slot
// cross-warp butterfly itself (same inputs, same order: the same bits in every CTA). Each chunk is
// one 128-wide quantization group. `bar`: kBarWords u32 per row (arrivals, departures, 32 f32
// sums), zero on entry; the last CTA to leave zeroes them again, so stream-ordered launches
// reuse them. All CTAs of a row are resident together before any waits: the next kernel starts
// only after every CTA of this one has executed its trigger at entry.
constexpr int kSplitCtas = 8;
constexpr int kSplitThreads = 128;  // 1024 / kSplitCtas: candle's block, split
constexpr int kBarWords = 2 + 32;
static_assert(kBarWords == FP8GEMM_NORM_BARRIER_WORDS, "api.h's barrier size");

__global__ void __launch_bounds__(kSplitThreads)
    add_rmsnorm_quant_split_kernel(const __nv_bfloat16* __restrict__ x,
                                   const __nv_bfloat16* __restrict__ residual,
                                   const __nv_bfloat16* __restrict__ gamma, const float eps,
                                   __nv_bfloat16* __restrict__ x_sum, uint8_t* __restrict__ q,
                                   float* __restrict__ sa, const int64_t m, const int ncols,
                                   const float* __restrict__ rpart, const int splits,
                                   unsigned* __restrict__ bar, const int x_settled) {
  // Trace marks: 1 past the PDL wait (stage_norm_row), 2 chunks staged, 3 past the CTAs' barrier.
  FP8GEMM_TRACE_BEGIN(FP8GEMM_TRACE_NORM_SPLIT);
  griddep_launch_dependents();

  const int c = blockIdx.x, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int64_t row = blockIdx.y;
  const int64_t base = row * ncols;
  const int kb = ncols / 128;
  const int nch = (kb - c + kSplitCtas - 1) / kSplitCtas;  // chunks c, c + 8, ... (kb >= 8)
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* h_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [nch][128]
  __nv_bfloat16* g_s = h_s + nch * 128;
  __shared__ float s_warp[kSplitThreads / 32];
  __shared__ float s_scale;
  // Vector v (8 values) of this CTA: chunk v / 16, columns (v % 16) * 8 .. + 7 of it.
  auto col_of = [&](int v) { return (c + kSplitCtas * (v / 16)) * 128 + (v % 16) * 8; };
  const int nvec = nch * 16;

  // 1. h = x (+ residual) for this CTA's chunks, staged as in add_rmsnorm_quant_kernel.
  stage_norm_row<kSplitThreads>(col_of, nvec, base, x, gamma, residual, rpart, splits, m * ncols,
                                x_settled != 0, x_sum, h_s, g_s, FP8GEMM_TRACE_MARK_PTR(1));
  __syncthreads();
  if (tid == 0) FP8GEMM_TRACE_MARK(2);

  // 2. Virtual thread 128c + tid sums columns 128c + tid + 1024 i (candle's loop), i.e. entry
  // tid of local chunk i; the warp's butterfly is candle's.
  float acc = 0.0f;
  for (int i = 0; i < nch; ++i) {
    const float xi = static_cast<float>(h_s[i * 128 + tid]);
    acc += xi * xi;  // contracted to fma.rn.f32 exactly as in candle's build
  }
  acc = warp_sum_xor(acc);
  if (lane == 0) s_warp[warp] = acc;
  __syncthreads();
  unsigned* arrivals = bar + row * kBarWords;
  unsigned* departures = arrivals + 1;
  unsigned* slots = arrivals + 2;
  if (tid == 0) {
#pragma unroll
    for (int w = 0; w < kSplitThreads / 32; ++w)
      slots[c * (kSplitThreads / 32) + w] = __float_as_uint(s_warp[w]);
    __threadfence();  // the sums before the arrival
    atomicAdd(arrivals, 1u);
    while (fp8gemm::ptx::ld_acquire_gpu(arrivals) < static_cast<unsigned>(kSplitCtas)) {
    }
    __threadfence();  // the other CTAs' sums, published before their arrival
    FP8GEMM_TRACE_MARK(3);
  }
  __syncthreads();
  if (warp == 0) {
    // candle's cross-warp sum: slot w = virtual warp w's sum, one butterfly over 32 lanes.
    const float total = warp_sum_xor(__uint_as_float(__ldcg(slots + lane)));
    if (lane == 0) {
      s_scale = rms_of(total, ncols, eps);
      // Leave the row's words zeroed for the next launch once every CTA has read the sums.
      if (atomicAdd(departures, 1u) == static_cast<unsigned>(kSplitCtas) - 1) {
        for (int i = 0; i < kBarWords; ++i) arrivals[i] = 0u;
      }
    }
  }
  __syncthreads();
  const float scale = s_scale;

  // 3. Normalize and quantize, one chunk (= one 128-wide group) per half-warp.
  const int sub = lane % 16;
  const int64_t m_pad = (m + 3) / 4 * 4;
  for (int j0 = 0; j0 < nch; j0 += 2 * (kSplitThreads / 32)) {  // warp-uniform trip count
    const int j = j0 + warp * 2 + lane / 16;
    const bool valid = j < nch;
    const int g = c + kSplitCtas * (valid ? j : 0);
    const int col = g * 128 + sub * 8;
    float v[8];
    if (valid) {
      rmsnorm8(scale, *reinterpret_cast<const uint4*>(h_s + j * 128 + sub * 8),
               *reinterpret_cast<const uint4*>(g_s + j * 128 + sub * 8), v);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = 0.f;
    }
    quantize_group(v, valid, sub, q + base + col, sa + int64_t(g) * m_pad + row);
  }
  if (row == m - 1 && c == 0) zero_scale_padding(sa, m, kb, tid, kSplitThreads);
  FP8GEMM_TRACE_END();
}

// Half a warp per 128-wide group of a (= 128 columns of gate and the same of up), grid-stride
// over all m * ceil(inter / 128) groups (gemm/quant.cu's mapping). kRagged (inter % 128 != 0,
// inter % 8 == 0): the last group of a row is partial, its lanes past inter idle.
template <bool kRagged>
__global__ void __launch_bounds__(256) swiglu_quant_kernel(const __nv_bfloat16* __restrict__ gu,
                                                           uint8_t* __restrict__ q,
                                                           float* __restrict__ sa,
                                                           const int64_t m, const int64_t inter) {
  FP8GEMM_TRACE_BEGIN(FP8GEMM_TRACE_SWIGLU);  // mark 1: past the PDL wait
  griddep_launch_dependents();
  griddep_wait();
  if (threadIdx.x == 0) FP8GEMM_TRACE_MARK(1);
  const int64_t kb = kRagged ? (inter + 127) / 128 : inter / 128;
  const int64_t groups = m * kb;
  const int64_t m_pad = (m + 3) / 4 * 4;
  const int lane = threadIdx.x % 32, sub = lane % 16;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t wid = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; wid * 2 < groups;
       wid += warps) {
    const int64_t g = wid * 2 + lane / 16;
    const bool valid = g < groups;
    const int64_t row = valid ? g / kb : 0, cb = valid ? g % kb : 0;
    const int64_t col = cb * 128 + sub * 8;
    const bool live = kRagged ? valid && col < inter : valid;  // this lane's columns exist
    float v[8];
    if (live) {
      const __nv_bfloat16* gate_row = gu + row * 2 * inter;
      const uint4 gv = *reinterpret_cast<const uint4*>(gate_row + col);
      const uint4 uv = *reinterpret_cast<const uint4*>(gate_row + inter + col);
      const __nv_bfloat162* g2 = reinterpret_cast<const __nv_bfloat162*>(&gv);
      const __nv_bfloat162* u2 = reinterpret_cast<const __nv_bfloat162*>(&uv);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 a = silu_mul_bf16x2(g2[j], u2[j]);
        v[2 * j] = a.x;
        v[2 * j + 1] = a.y;
      }
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = 0.f;
    }
    quantize_group(v, live, sub, q + row * inter + col, sa + cb * m_pad + row);
  }
  zero_scale_padding(sa, m, kb, int64_t(blockIdx.x) * blockDim.x + threadIdx.x,
                     int64_t(gridDim.x) * blockDim.x);
  FP8GEMM_TRACE_END();
}

}  // namespace fused
}  // namespace fp8gemm

using namespace fp8gemm;

// Timeline trace reader of this translation unit (builds with -DFP8GEMM_TRACE only).
FP8GEMM_TRACE_READER(fp8gemm_trace_read_fused_quant)

namespace {

bool misaligned(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) != 0; }


// Shared memory the kernel may use without opting in.
constexpr size_t kDefaultSmem = 48 * 1024;

template <int kThreads, bool kRagged>
int32_t run_add_rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* residual,
                        const __nv_bfloat16* gamma, float eps, __nv_bfloat16* x_sum, uint8_t* q,
                        float* sa, int64_t m, int k, const float* rpart, int splits,
                        int x_settled, cudaStream_t stream) {
  auto kern = fused::add_rmsnorm_quant_kernel<kThreads, kRagged>;
  const size_t smem = 2 * size_t(k) * sizeof(__nv_bfloat16);  // the row h, and gamma
  // Static shared memory: s_sum (128 bytes). Rows longer than ~12K columns opt in.
  if (smem + 128 > kDefaultSmem) {
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
      return FP8GEMM_ERR_LAUNCH;
    if (smem + 128 > size_t(optin)) return FP8GEMM_ERR_SHAPE;
    static std::atomic<uint64_t> done{0};
    if (!raise_smem_limit_once(reinterpret_cast<const void*>(kern), done, dev, size_t(optin) - 128))
      return FP8GEMM_ERR_LAUNCH;
  }
  return launch_pdl(kern, dim3(static_cast<unsigned>(m)), dim3(kThreads), smem, stream, x, residual,
                    gamma, eps, x_sum, q, sa, m, k, rpart, splits, x_settled);
}

int32_t run_add_rmsnorm_split(const __nv_bfloat16* x, const __nv_bfloat16* residual,
                              const __nv_bfloat16* gamma, float eps, __nv_bfloat16* x_sum,
                              uint8_t* q, float* sa, int64_t m, int k, const float* rpart,
                              int splits, unsigned* bar, int x_settled, cudaStream_t stream) {
  const int chunks = (k / 128 + fused::kSplitCtas - 1) / fused::kSplitCtas;
  const size_t smem = 2 * size_t(chunks) * 128 * sizeof(__nv_bfloat16);  // h and gamma chunks
  if (smem + 64 > kDefaultSmem) return FP8GEMM_ERR_SHAPE;  // 32 KB at the caller's k <= 65536
  return launch_pdl(fused::add_rmsnorm_quant_split_kernel,
                    dim3(fused::kSplitCtas, static_cast<unsigned>(m)), dim3(fused::kSplitThreads),
                    smem, stream, x, residual, gamma, eps, x_sum, q, sa, m, k, rpart, splits, bar,
                    x_settled);
}

}  // namespace

// Both entry points: the residual is bf16 `residual`, or the f32 split-K partials `rpart`
// ([splits][m][k]), or absent (both NULL).
static int32_t add_rmsnorm_entry(const void* x, const void* residual, const float* rpart,
                                 int32_t splits, const void* gamma, float eps, void* x_sum_out,
                                 uint8_t* q, float* sa, int64_t m, int64_t k, uint32_t* row_barrier,
                                 uint32_t flags, void* stream) {
  // Grid: one CTA per row (gridDim.x < 2^31); the kernel indexes columns with int. k % 8: whole
  // 16-byte vectors of bf16 per row (the last 128-wide group may be partial).
  if (m < 1 || m > 0x7fffffff || k < 8 || k % 8 != 0 || k > (int64_t(1) << 24))
    return FP8GEMM_ERR_SHAPE;
  const bool adds = residual != nullptr || rpart != nullptr;
  if (rpart != nullptr && (splits < 1 || splits > 64)) return FP8GEMM_ERR_SHAPE;
  if (!x || !gamma || !q || !sa || (adds && !x_sum_out)) return FP8GEMM_ERR_ALIGN;
  if (misaligned(x) || misaligned(gamma) || misaligned(q) || misaligned(sa) ||
      (adds && misaligned(x_sum_out)) || (residual && misaligned(residual)) ||
      (rpart && misaligned(rpart)))
    return FP8GEMM_ERR_ALIGN;
  const auto* xb = static_cast<const __nv_bfloat16*>(x);
  const auto* rb = static_cast<const __nv_bfloat16*>(residual);
  const auto* gb = static_cast<const __nv_bfloat16*>(gamma);
  auto* sb = adds ? static_cast<__nv_bfloat16*>(x_sum_out) : nullptr;
  if ((flags & ~FP8GEMM_NORM_X_SETTLED) != 0) return FP8GEMM_ERR_SHAPE;
  const int settled = (flags & FP8GEMM_NORM_X_SETTLED) != 0;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int kk = static_cast<int>(k);
  // candle's rmsnorm block size: 32 threads below 1024 columns, else 1024 — split over
  // kSplitCtas CTAs for up to FP8GEMM_NORM_SPLIT_MAX_ROWS rows when the caller lends the
  // barrier words (measured faster at one row only; whole 128-column chunks only: a ragged row
  // takes the one-CTA kernel, the barrier unused).
  const bool ragged = k % 128 != 0;
  if (k < 1024) {
    return ragged ? run_add_rmsnorm<32, true>(xb, rb, gb, eps, sb, q, sa, m, kk, rpart, splits, settled, s)
                  : run_add_rmsnorm<32, false>(xb, rb, gb, eps, sb, q, sa, m, kk, rpart, splits, settled, s);
  }
  if (row_barrier != nullptr && m <= FP8GEMM_NORM_SPLIT_MAX_ROWS && k <= 65536 && !ragged) {
    if ((reinterpret_cast<uintptr_t>(row_barrier) & 3) != 0) return FP8GEMM_ERR_ALIGN;
    return run_add_rmsnorm_split(xb, rb, gb, eps, sb, q, sa, m, kk, rpart, splits,
                                 reinterpret_cast<unsigned*>(row_barrier), settled, s);
  }
  return ragged ? run_add_rmsnorm<1024, true>(xb, rb, gb, eps, sb, q, sa, m, kk, rpart, splits, settled, s)
                : run_add_rmsnorm<1024, false>(xb, rb, gb, eps, sb, q, sa, m, kk, rpart, splits, settled, s);
}

extern "C" int32_t fp8gemm_add_rmsnorm_quant(const void* x, const void* residual, const void* gamma,
                                             float eps, void* x_sum_out, uint8_t* q, float* sa,
                                             int64_t m, int64_t k, uint32_t* row_barrier,
                                             uint32_t flags, void* stream) {
  return add_rmsnorm_entry(x, residual, nullptr, 0, gamma, eps, x_sum_out, q, sa, m, k,
                           row_barrier, flags, stream);
}

extern "C" int32_t fp8gemm_add_partials_rmsnorm_quant(const void* x, const float* partials,
                                                      int32_t splits, const void* gamma, float eps,
                                                      void* x_sum_out, uint8_t* q, float* sa,
                                                      int64_t m, int64_t k, uint32_t* row_barrier,
                                                      uint32_t flags, void* stream) {
  if (!partials) return FP8GEMM_ERR_ALIGN;
  return add_rmsnorm_entry(x, nullptr, partials, splits, gamma, eps, x_sum_out, q, sa, m, k,
                           row_barrier, flags, stream);
}

extern "C" int32_t fp8gemm_swiglu_quant(const void* gu, int64_t m, int64_t inter, uint8_t* q,
                                        float* sa, void* stream) {
  // inter % 8: whole 16-byte vectors of the gate and up halves (the last group may be partial).
  if (m < 1 || inter < 8 || inter % 8 != 0) return FP8GEMM_ERR_SHAPE;
  if (!gu || !q || !sa) return FP8GEMM_ERR_ALIGN;
  if (misaligned(gu) || misaligned(q) || misaligned(sa)) return FP8GEMM_ERR_ALIGN;
  // 16 groups per 256-thread CTA, capped like gemm/quant.cu (the kernel grid-strides).
  const int64_t groups = m * ((inter + 127) / 128);
  int64_t blocks = (groups + 15) / 16;
  if (blocks > 132 * 32) blocks = 132 * 32;
  const auto kern = inter % 128 != 0 ? &fused::swiglu_quant_kernel<true> : &fused::swiglu_quant_kernel<false>;
  return launch_pdl(kern, dim3(static_cast<unsigned>(blocks)), dim3(256), 0,
                    static_cast<cudaStream_t>(stream), static_cast<const __nv_bfloat16*>(gu), q, sa,
                    m, inter);
}
