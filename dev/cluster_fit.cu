// How many thread-block clusters of each size fit on the GPU at once (cudaOccupancyMaxActive-
// Clusters), for a kernel of 384 threads and a given dynamic shared memory size: whether a grid
// of clusters runs in one wave. Build and run: nvcc -arch=sm_90a -o /tmp/cluster_fit
// dev/cluster_fit.cu && /tmp/cluster_fit
#include <cstdio>
#include <cuda_runtime.h>

__global__ void empty_kernel() { extern __shared__ char s[]; (void)s; }

int main() {
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  std::printf("CLUSTERFIT smem_KB cluster max_active_clusters ctas\n");
  for (int kb : {50, 100, 150, 200, 227}) {
    const int smem = kb * 1024;
    cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    for (int c : {1, 2, 3, 4, 8, 16}) {
      cudaLaunchAttribute attr;
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = c;
      attr.val.clusterDim.y = 1;
      attr.val.clusterDim.z = 1;
      cudaLaunchConfig_t lc = {};
      lc.gridDim = dim3(c * 64, 1, 1);
      lc.blockDim = dim3(384, 1, 1);
      lc.dynamicSmemBytes = smem;
      lc.attrs = &attr;
      lc.numAttrs = 1;
      int n = -1;
      const cudaError_t e = cudaOccupancyMaxActiveClusters(&n, empty_kernel, &lc);
      if (e != cudaSuccess) {
        std::printf("CLUSTERFIT %d %d error %s\n", kb, c, cudaGetErrorString(e));
        (void)cudaGetLastError();
        continue;
      }
      std::printf("CLUSTERFIT %d %d %d %d\n", kb, c, n, n * c);
    }
  }
  return 0;
}
