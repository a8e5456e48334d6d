// Host-side launch with programmatic dependent launch (PDL), the convention of every kernel in
// kernels/: the kernel may start while the previous kernel of the stream finishes, so it must
// execute griddepcontrol.wait before it reads that kernel's outputs or overwrites its inputs.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "api.h"

namespace fp8gemm {

// Launches `kern` on `stream` with the PDL attribute; FP8GEMM_ERR_LAUNCH (and the CUDA error
// cleared) when the launch is refused.
template <typename... Params, typename... Args>
int32_t launch_pdl(void (*kern)(Params...), dim3 grid, dim3 block, size_t smem,
                   cudaStream_t stream, Args... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t lc = {};
  lc.gridDim = grid;
  lc.blockDim = block;
  lc.dynamicSmemBytes = smem;
  lc.stream = stream;
  lc.attrs = attr;
  lc.numAttrs = 1;
  if (cudaLaunchKernelEx(&lc, kern, static_cast<Params>(args)...) != cudaSuccess) {
    (void)cudaGetLastError();
    return FP8GEMM_ERR_LAUNCH;
  }
  return FP8GEMM_OK;
}

}  // namespace fp8gemm
