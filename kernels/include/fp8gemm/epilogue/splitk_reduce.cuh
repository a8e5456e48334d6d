// The split-K reduction kernel: y = bf16 of the f32 partials [splits][m][n] a workspace split
// left, summed in split order (deterministic, no atomics). Launched by fp8gemm_gemm after a
// workspace split and by fp8gemm_reduce_partials (gemm/gemm.cu).
#pragma once
#include <cuda_bf16.h>
#include <cstdint>

#include "fp8gemm/common/trace.cuh"

namespace fp8gemm {

// y[i] = bf16(sum_s partial[s][i]) in fixed split order: deterministic, no atomics.
// count = m * n is a multiple of 4 (n % 16 == 0); buffers are 16-byte aligned.
template <int kThreads = 256>
__global__ void __launch_bounds__(kThreads) splitk_reduce_kernel(const float* __restrict__ partial,
                                                            __nv_bfloat16* __restrict__ y,
                                                            int64_t count, int splits) {
  FP8GEMM_TRACE_BEGIN(FP8GEMM_TRACE_REDUCE);  // mark 1: past the PDL wait
  // Let the next kernel launch now (it waits for our completion before reading y): keeps the
  // chain of early launches going, so the GEMM after it can fill its ring during us.
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");  // the GEMM's partials are complete
  if (threadIdx.x == 0) FP8GEMM_TRACE_MARK(1);
  const int64_t n4 = count / 4;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n4;
       i += int64_t(gridDim.x) * blockDim.x) {
    float4 acc = reinterpret_cast<const float4*>(partial)[i];
    for (int s = 1; s < splits; ++s) {
      const float4 v = reinterpret_cast<const float4*>(partial + s * count)[i];
      acc.x += v.x;
      acc.y += v.y;
      acc.z += v.z;
      acc.w += v.w;
    }
    __nv_bfloat162 lo = __floats2bfloat162_rn(acc.x, acc.y);
    __nv_bfloat162 hi = __floats2bfloat162_rn(acc.z, acc.w);
    uint2 packed;
    packed.x = *reinterpret_cast<uint32_t*>(&lo);
    packed.y = *reinterpret_cast<uint32_t*>(&hi);
    reinterpret_cast<uint2*>(y)[i] = packed;
  }
  FP8GEMM_TRACE_END();
}

}  // namespace fp8gemm
