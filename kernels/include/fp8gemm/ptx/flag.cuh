// Global-memory flags between CTAs of one grid (gpu scope). One line of inline PTX each.
#pragma once
#include <cstdint>

namespace fp8gemm::ptx {

// Release increment: the caller's earlier writes (and those its CTA barrier made it observe)
// are visible to whoever acquires the new value.
__device__ __forceinline__ void red_release_gpu_add(int* flag, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(flag), "r"(v) : "memory");
}
__device__ __forceinline__ int ld_acquire_gpu(const int* flag) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
  return v;
}
__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned* flag) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
  return v;
}
__device__ __forceinline__ void st_relaxed_gpu(int* flag, int v) {
  asm volatile("st.relaxed.gpu.global.s32 [%0], %1;" ::"l"(flag), "r"(v) : "memory");
}

}  // namespace fp8gemm::ptx
