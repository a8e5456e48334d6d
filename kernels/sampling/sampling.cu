// Greedy sampling: the index of the largest f32 or bf16 logit of each row (declarations:
// api.h).
//
// candle 0.11's CUDA argmax (reduce.cu fast_argmax) computes a strided index with 64-bit
// divisions for every element and reduces through shared memory one __syncthreads per step:
// 108 us per Qwen3 decode step (f32 [B, 151936], B = 1 or 16) on an H200. A row is 600 KB,
// just written by the f32 cast of the logits (L2-resident): one CTA streams it at the SM's
// load bandwidth with 16-byte loads, then reduces with shuffles.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "api.h"
#include "fp8gemm/common/launch_pdl.cuh"
#include "fp8gemm/ptx/tma.cuh"
#include "fp8gemm/common/trace.cuh"

namespace fp8gemm::sampling {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
// 16-byte loads issued back to back per thread: 8 x 16 B x 1024 threads = 128 KB in flight per
// SM, enough to cover L2 (and HBM) latency at the SM's load bandwidth.
constexpr int kUnroll = 8;
constexpr uint32_t kNoIndex = 0xffffffffu;  // > every real index (cols < 2^31)

// One thread visits its columns in increasing order, so only a strictly larger value replaces its
// candidate: the first index of a tie is kept, and a NaN never wins (the comparison is false),
// which is candle's CPU loop (`if best < x[c]`) for every column but 0 (handled at the end).
__device__ __forceinline__ void scan1(float& bv, uint32_t& bi, float v, uint32_t i) {
  if (v > bv) {
    bv = v;
    bi = i;
  }
}

// kVec consecutive columns: one comparison on their maximum (a new maximum is rare after the
// first few vectors), then the first column holding it. fmaxf drops NaNs (all NaNs give NaN,
// which loses the comparison); == finds the column (-0.0 == +0.0, like candle's `<`).
template <int kVec>
__device__ __forceinline__ void scan_vec(float& bv, uint32_t& bi, const float (&a)[kVec], uint32_t i) {
  float m = a[0];
#pragma unroll
  for (int j = 1; j < kVec; ++j) m = fmaxf(m, a[j]);
  if (m > bv) {
    bv = m;
    uint32_t at = kVec - 1;
#pragma unroll
    for (int j = kVec - 2; j >= 0; --j) at = a[j] == m ? j : at;
    bi = i + at;
  }
}

// Element types of the logits: f32, or bf16 (the lm_head's own output: no f32 cast launch).
// Every bf16 value converts exactly to f32, so both give the index candle's CPU argmax gives
// for the same values.
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

// A 16-byte vector of T as floats.
template <typename T>
__device__ __forceinline__ void unpack(const uint4& u, float (&a)[16 / sizeof(T)]) {
  const T* t = reinterpret_cast<const T*>(&u);
#pragma unroll
  for (int j = 0; j < int(16 / sizeof(T)); ++j) a[j] = to_f32(t[j]);
}

// Merging two threads' candidates: larger value, or equal value at a smaller index. A total
// order on (value, index), so the merge order does not matter and the result is the first
// index of the maximum.
__device__ __forceinline__ void take(float& bv, uint32_t& bi, float v, uint32_t i) {
  if (v > bv || (v == bv && i < bi)) {
    bv = v;
    bi = i;
  }
}

__device__ __forceinline__ void warp_reduce(float& bv, uint32_t& bi) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const uint32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
    take(bv, bi, ov, oi);
  }
}

// One CTA per row. The row is split into a head of columns up to its first 16-byte boundary, a
// body of 16-byte vectors (4 f32 / 8 bf16), and a tail, so that any row start (a view with an
// odd offset, an odd row stride) still takes the vector path. Each thread scans the vectors
// tid, tid + kThreads, ... kUnroll at a time (predicated loads: no serialized remainder loop).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    argmax_rows_kernel(const T* __restrict__ x, const int cols, const int64_t row_stride,
                       uint32_t* __restrict__ out) {
  constexpr int kVec = 16 / sizeof(T);
  FP8GEMM_TRACE_BEGIN(FP8GEMM_TRACE_ARGMAX);  // mark 1: past the PDL wait
  // The logits are the previous kernel's output; the next kernel may start its prologue now.
  ptx::griddep_launch_dependents();
  ptx::griddep_wait();
  if (threadIdx.x == 0) FP8GEMM_TRACE_MARK(1);

  const int tid = threadIdx.x;
  const T* row = x + int64_t(blockIdx.x) * row_stride;
  float bv = -INFINITY;
  uint32_t bi = kNoIndex;

  const int past = static_cast<int>((reinterpret_cast<uintptr_t>(row) / sizeof(T)) & (kVec - 1));
  const int head = min(cols, (kVec - past) & (kVec - 1));
  const int nvec = (cols - head) / kVec;
  const int tail = head + nvec * kVec;  // first column of the tail
  if (tid < head) scan1(bv, bi, to_f32(row[tid]), tid);

  const uint4* vec = reinterpret_cast<const uint4*>(row + head);
  for (int v0 = tid; v0 < nvec; v0 += kUnroll * kThreads) {
    uint4 a[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = v0 + u * kThreads;
      if (v < nvec) a[u] = __ldg(vec + v);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = v0 + u * kThreads;
      if (v < nvec) {
        float f[kVec];
        unpack<T>(a[u], f);
        scan_vec<kVec>(bv, bi, f, static_cast<uint32_t>(head + kVec * v));
      }
    }
  }
  if (tid < cols - tail) scan1(bv, bi, to_f32(row[tail + tid]), tail + tid);  // after the body: in order

  // Block reduction: warps by shuffles, then warp 0 over the warps' results.
  __shared__ float s_v[kWarps];
  __shared__ uint32_t s_i[kWarps];
  warp_reduce(bv, bi);
  const int warp = tid / 32, lane = tid % 32;
  if (lane == 0) {
    s_v[warp] = bv;
    s_i[warp] = bi;
  }
  __syncthreads();
  if (warp == 0) {
    bv = lane < kWarps ? s_v[lane] : -INFINITY;
    bi = lane < kWarps ? s_i[lane] : kNoIndex;
    warp_reduce(bv, bi);
    // candle starts from column 0 and never replaces a NaN there. kNoIndex: no column beat the
    // -inf start, so every non-NaN value is -inf and candle keeps column 0 too.
    if (lane == 0) out[blockIdx.x] = (isnan(to_f32(row[0])) || bi == kNoIndex) ? 0u : bi;
  }
  FP8GEMM_TRACE_END();
}

template <typename T>
int32_t launch_argmax(const T* x, int64_t rows, int64_t cols, int64_t row_stride, uint32_t* out,
                      void* stream) {
  // One CTA per row (gridDim.x < 2^31); columns are indexed with int and returned as u32.
  if (rows < 1 || rows > 0x7fffffff || cols < 1 || cols > 0x7fffffff || row_stride < 0)
    return FP8GEMM_ERR_SHAPE;
  // Element alignment is all the kernel needs (it finds the 16-byte boundary of each row).
  if (x == nullptr || out == nullptr || (reinterpret_cast<uintptr_t>(x) % sizeof(T)) != 0 ||
      (reinterpret_cast<uintptr_t>(out) & 3) != 0)
    return FP8GEMM_ERR_ALIGN;
  return launch_pdl(argmax_rows_kernel<T>, dim3(static_cast<unsigned>(rows)), dim3(kThreads), 0,
                    static_cast<cudaStream_t>(stream), x, static_cast<int>(cols), row_stride, out);
}

}  // namespace fp8gemm::sampling

extern "C" int32_t fp8gemm_argmax_rows(const void* x, int32_t x_dtype, int64_t rows, int64_t cols,
                                       int64_t row_stride, uint32_t* out, void* stream) {
  using fp8gemm::sampling::launch_argmax;
  switch (x_dtype) {
    case FP8GEMM_F32: return launch_argmax(static_cast<const float*>(x), rows, cols, row_stride, out, stream);
    case FP8GEMM_BF16:
      return launch_argmax(static_cast<const __nv_bfloat16*>(x), rows, cols, row_stride, out, stream);
    default: return FP8GEMM_ERR_DTYPE;
  }
}

// Timeline trace reader of this translation unit (builds with -DFP8GEMM_TRACE only).
FP8GEMM_TRACE_READER(fp8gemm_trace_read_sampling)
