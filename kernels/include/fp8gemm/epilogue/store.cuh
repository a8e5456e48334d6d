// Stores of the GEMM epilogue: a warpgroup's f32 accumulator fragment (m64 x N wgmma layout) to
// y (bf16) or, for split-K, to the f32 partial buffer; the bf16 staging of the TMA-store
// epilogue.
//
// Fragment layout of wgmma m64nN (per thread): for j in [0, N/8): d[4j + 2h + e] is
// row (warp%4)*16 + lane/4 + 8h, column 8j + 2*(lane%4) + e.
#pragma once
#include <cuda_bf16.h>
#include <cstdint>

#include "fp8gemm/ptx/mbarrier.cuh"

namespace fp8gemm {

// Stores one m64 x N fragment. `row0`/`col0`: the fragment's first MMA row / column.
// kTransposed (swap-AB): MMA rows are output columns (features) and MMA columns are tokens.
// Every in-bounds element is written; out-of-bounds ones (ragged M, last N tile) are skipped.
template <int N, bool kTransposed, bool kPartial>
__device__ __forceinline__ void store_fragment(const float* d, int row0, int col0, int m, int n,
                                               __nv_bfloat16* __restrict__ y,
                                               float* __restrict__ partial, int split) {
  const int lane = threadIdx.x % 32;
  const int r = row0 + ((threadIdx.x / 32) % 4) * 16 + lane / 4;
  const int c = col0 + (lane % 4) * 2;
  const int64_t split_off = static_cast<int64_t>(split) * m * n;
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = r + 8 * h, col = c + 8 * j;
      const float v0 = d[4 * j + 2 * h], v1 = d[4 * j + 2 * h + 1];
      if (!kTransposed) {
        // y[row][col, col+1]; n % 16 == 0 and col even: col < n implies col + 1 < n.
        if (row < m && col < n) {
          const int64_t off = static_cast<int64_t>(row) * n + col;
          if (kPartial)
            *reinterpret_cast<float2*>(partial + split_off + off) = make_float2(v0, v1);
          else
            *reinterpret_cast<__nv_bfloat162*>(y + off) = __floats2bfloat162_rn(v0, v1);
        }
      } else {
        // y[col][row] and y[col + 1][row]: tokens are MMA columns.
        if (row < n) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int tok = col + e;
            if (tok < m) {
              const int64_t off = static_cast<int64_t>(tok) * n + row;
              if (kPartial)
                partial[split_off + off] = e ? v1 : v0;
              else
                y[off] = __float2bfloat16_rn(e ? v1 : v0);
            }
          }
        }
      }
    }
  }
}

// TMA-store epilogue, first half: a warpgroup's kWaves m64 x TN fragments as bf16 in shared
// memory, laid out as the TMA boxes the store reads: TN / 64 slabs of [kWaves * 64 rows x 64
// columns], each row 128 bytes with the 128-byte swizzle (16-byte chunk c of row r sits at
// chunk c ^ (r % 8)). One st.shared.b32 of a warp covers 8 rows x 16 bytes; with the swizzle
// those land on 32 different banks. `stage` is 1024-byte aligned.
template <int TN, int kWaves>
__device__ __forceinline__ void stage_bf16_swizzled(const float (*acc)[TN / 2], uint8_t* stage) {
  static_assert(TN % 64 == 0, "whole 64-column slabs");
  constexpr int kSlabBytes = kWaves * 64 * 128;
  const int lane = threadIdx.x % 32;
  const int q = lane / 4;  // row within the 8-row group = row % 8
  const uint32_t base = ptx::smem_addr(stage) + ((threadIdx.x / 32) % 4) * 16 * 128 + q * 128 + (lane % 4) * 4;
#pragma unroll
  for (int w = 0; w < kWaves; ++w)
#pragma unroll
    for (int j = 0; j < TN / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t addr = base + (j / 8) * kSlabBytes + (w * 64 + 8 * h) * 128 + (((j % 8) ^ q) * 16);
        __nv_bfloat162 v = __floats2bfloat162_rn(acc[w][4 * j + 2 * h], acc[w][4 * j + 2 * h + 1]);
        asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(*reinterpret_cast<uint32_t*>(&v)) : "memory");
      }
}

}  // namespace fp8gemm
