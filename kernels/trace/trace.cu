// fp8gemm_trace_dump: writes the timeline trace rings (fp8gemm/common/trace.cuh) of every traced
// translation unit to a file. Compiled only in trace builds (cargo feature `trace`, which also
// defines FP8GEMM_TRACE for every kernel source).
//
// File: per translation unit a header of four u32 (magic "FP8T", unit id, append count, ring
// capacity) followed by min(count, capacity) 32-byte records (trace::Rec). Unit ids: 0 swap-AB,
// 1 small-M, 2 warp-specialized, 3 persistent, 4 fused_quant, 5 attention, 6 sampling,
// 7 quant (activation quantizer), 8 gemm (split-K reduce), 9 swiglu (gated gate/up GEMM),
// 10 grouped (mixture-of-experts GEMM).
// A ring that wrapped (count > capacity) holds the latest `capacity` records out of order;
// dev/trace_timeline.py sorts by entry time.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "api.h"
#include "fp8gemm/common/trace.cuh"

#ifndef FP8GEMM_TRACE
#error "kernels/trace/trace.cu belongs to trace builds only (-DFP8GEMM_TRACE)"
#endif

extern "C" {
int fp8gemm_trace_read_swap_ab(void*, uint32_t, uint32_t*);
int fp8gemm_trace_read_small_m(void*, uint32_t, uint32_t*);
int fp8gemm_trace_read_warp_specialized(void*, uint32_t, uint32_t*);
int fp8gemm_trace_read_persistent(void*, uint32_t, uint32_t*);
int fp8gemm_trace_read_fused_quant(void*, uint32_t, uint32_t*);
int fp8gemm_trace_read_attention(void*, uint32_t, uint32_t*);
int fp8gemm_trace_read_sampling(void*, uint32_t, uint32_t*);
int fp8gemm_trace_read_quant(void*, uint32_t, uint32_t*);
int fp8gemm_trace_read_gemm(void*, uint32_t, uint32_t*);
int fp8gemm_trace_read_swiglu(void*, uint32_t, uint32_t*);
int fp8gemm_trace_read_grouped(void*, uint32_t, uint32_t*);
}

extern "C" int64_t fp8gemm_trace_dump(const char* path) {
  using Reader = int (*)(void*, uint32_t, uint32_t*);
  const Reader readers[] = {fp8gemm_trace_read_swap_ab,  fp8gemm_trace_read_small_m,
                            fp8gemm_trace_read_warp_specialized, fp8gemm_trace_read_persistent,
                            fp8gemm_trace_read_fused_quant, fp8gemm_trace_read_attention,
                            fp8gemm_trace_read_sampling, fp8gemm_trace_read_quant,
                            fp8gemm_trace_read_gemm, fp8gemm_trace_read_swiglu,
                            fp8gemm_trace_read_grouped};
  if (cudaDeviceSynchronize() != cudaSuccess) return -2;
  FILE* f = std::fopen(path, "wb");
  if (!f) return -3;
  std::vector<fp8gemm::trace::Rec> buf(fp8gemm::trace::kCap);
  int64_t total = 0;
  for (uint32_t unit = 0; unit < sizeof(readers) / sizeof(readers[0]); ++unit) {
    uint32_t count = 0;
    if (readers[unit](buf.data(), fp8gemm::trace::kCap, &count) != 0) {
      std::fclose(f);
      return -2;
    }
    const uint32_t n = count < fp8gemm::trace::kCap ? count : fp8gemm::trace::kCap;
    const uint32_t head[4] = {0x54385046u /* "FP8T" */, unit, count, fp8gemm::trace::kCap};
    std::fwrite(head, sizeof(head), 1, f);
    std::fwrite(buf.data(), sizeof(fp8gemm::trace::Rec), n, f);
    total += n;
  }
  return std::fclose(f) == 0 ? total : -3;
}
