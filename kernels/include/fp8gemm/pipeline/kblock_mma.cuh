// One 128-wide K block of a warpgroup's MMA: four wgmma k32 into a block accumulator (scale-d 0
// on the first, so the accumulator is overwritten), committed as one wgmma group. Shared by the
// main loops (sm90_fp8_gemm_1d2d.cuh, mainloop_xpromote.cuh).
#pragma once
#include <cstdint>

#include "fp8gemm/pipeline/ring.cuh"
#include "fp8gemm/ptx/wgmma.cuh"

namespace fp8gemm {

// da / db: shared-memory descriptors of the K block's A and B tiles (K-major, 128B swizzle);
// d: MMA::kAcc block-accumulator registers, not read by any instruction while the group runs.
template <class MMA>
__device__ __forceinline__ void issue_kblock_mma(uint64_t da, uint64_t db, float* d) {
#pragma unroll
  for (int x = 0; x < MMA::kAcc; ++x) ptx::fence_operand(d[x]);
  ptx::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kBlockK / 32; ++kk) MMA::mma(da + 2 * kk, db + 2 * kk, d, kk > 0);
  ptx::wgmma_commit();
}

}  // namespace fp8gemm
