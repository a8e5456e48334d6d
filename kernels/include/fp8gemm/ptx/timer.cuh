// The GPU's nanosecond clock (%globaltimer): bounded waits and the timeline traces.
#pragma once

namespace fp8gemm::ptx {

__device__ __forceinline__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

}  // namespace fp8gemm::ptx
