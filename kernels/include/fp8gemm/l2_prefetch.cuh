// L2 warm-up issued by a small kernel for the GEMM that follows it (api.h fp8gemm_l2_prefetch).
#pragma once
#include <cstdint>

#include "../../api.h"

namespace fp8gemm {

// Host-side check of a hint: null or well formed (alignment, sizes). Returns false when malformed.
inline bool l2_prefetch_ok(const fp8gemm_l2_prefetch* h) {
  if (h == nullptr || h->base == nullptr) return true;
  return (reinterpret_cast<uintptr_t>(h->base) & 15) == 0 && h->rows >= 0 && h->segs >= 0 &&
         h->row_stride % 16 == 0 && h->seg_stride % 16 == 0 && h->seg_bytes > 0 &&
         h->seg_bytes % 16 == 0;
}

// The hint by value for a kernel parameter (base == nullptr: nothing to do).
inline fp8gemm_l2_prefetch l2_prefetch_arg(const fp8gemm_l2_prefetch* h) {
  if (h == nullptr) return fp8gemm_l2_prefetch{nullptr, 0, 0, 0, 0, 0};
  return *h;
}

// Every thread of the grid issues its share of the (row, segment) prefetches.
__device__ __forceinline__ void l2_prefetch_issue(const fp8gemm_l2_prefetch& h) {
  if (h.base == nullptr) return;
  const int64_t total = h.rows * h.segs;
  const int64_t threads = int64_t(gridDim.x) * gridDim.y * gridDim.z * blockDim.x;
  const int64_t block = (int64_t(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  for (int64_t i = block * blockDim.x + threadIdx.x; i < total; i += threads) {
    const int64_t r = i / h.segs, s = i - r * h.segs;
    const char* a = static_cast<const char*>(h.base) + r * h.row_stride + s * h.seg_stride;
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"(h.seg_bytes) : "memory");
  }
}

}  // namespace fp8gemm
