// Host-side launch with programmatic dependent launch (PDL), the convention of every kernel in
// kernels/: the kernel may start while the previous kernel of the stream finishes, so it must
// execute griddepcontrol.wait before it reads that kernel's outputs or overwrites its inputs.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "api.h"

namespace fp8gemm {

// Launches `kern` on `stream` with the PDL attribute, in clusters of (cluster_x, 1, 1) CTAs when
// cluster_x > 1 (grid.x a multiple of it); FP8GEMM_ERR_LAUNCH (and the CUDA error cleared) when
// the launch is refused.
template <typename... Params, typename... Args>
int32_t launch_pdl_cluster(void (*kern)(Params...), dim3 grid, dim3 block, size_t smem,
                           cudaStream_t stream, unsigned cluster_x, Args... args) {
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  attr[1].id = cudaLaunchAttributeClusterDimension;
  attr[1].val.clusterDim.x = cluster_x;
  attr[1].val.clusterDim.y = 1;
  attr[1].val.clusterDim.z = 1;
  cudaLaunchConfig_t lc = {};
  lc.gridDim = grid;
  lc.blockDim = block;
  lc.dynamicSmemBytes = smem;
  lc.stream = stream;
  lc.attrs = attr;
  lc.numAttrs = cluster_x > 1 ? 2 : 1;
  if (cudaLaunchKernelEx(&lc, kern, static_cast<Params>(args)...) != cudaSuccess) {
    (void)cudaGetLastError();
    return FP8GEMM_ERR_LAUNCH;
  }
  return FP8GEMM_OK;
}

// launch_pdl_cluster without a cluster.
template <typename... Params, typename... Args>
int32_t launch_pdl(void (*kern)(Params...), dim3 grid, dim3 block, size_t smem,
                   cudaStream_t stream, Args... args) {
  return launch_pdl_cluster(kern, grid, block, smem, stream, 1u, args...);
}

}  // namespace fp8gemm
