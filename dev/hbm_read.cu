// A plain HBM read stream: the practical floor of a decode-size GEMM, which reads its weights
// once (dev/hbm_floor.py builds and times it). Every thread reads 16-byte words with
// ld.global.nc (no L1 allocation), 8 independent loads in flight per iteration, grid-stride;
// the XOR of everything read is stored only if it equals a value it never takes, so the loads
// cannot be dropped and nothing is written.
#include <cstdint>
#include <cuda_runtime.h>

namespace {

__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__global__ void __launch_bounds__(512) read_kernel(const uint4* __restrict__ p, int64_t n16, uint32_t* sink) {
  constexpr int kUnroll = 8;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  uint32_t acc = 0;
  for (; i + (kUnroll - 1) * stride < n16; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = ld_stream(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n16; i += stride) {
    const uint4 v = ld_stream(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // never true for the driver's data (a constant fill)
}

}  // namespace

// Launches the read of `bytes` (a multiple of 16) at `p` on `stream` with `ctas_per_sm` CTAs of
// 512 threads per SM. Returns a cudaError_t.
extern "C" int hbm_read(const void* p, int64_t bytes, uint32_t* sink, int sms, int ctas_per_sm, cudaStream_t stream) {
  read_kernel<<<sms * ctas_per_sm, 512, 0, stream>>>(static_cast<const uint4*>(p), bytes / 16, sink);
  return static_cast<int>(cudaGetLastError());
}
