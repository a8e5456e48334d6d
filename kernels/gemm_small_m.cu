// Compiled configurations of the small-M schedule (kind FP8GEMM_KIND_SMALL_M).
#include "fp8gemm/launch.cuh"
#include "fp8gemm/schedules/small_m.cuh"

namespace fp8gemm {

// Warpgroup arrangement per tile width (harness sweep, session 9, docs/PERF.md):
// * 32 and 64 columns: one math warpgroup, full-width wgmma. Splitting the block accumulator
//   into N halves (one promoted while the other runs) reads the 64-row A tile from shared
//   memory twice per K block, and narrow wgmmas are bound by those reads: no halves is 5-15 %
//   faster on every swept shape (64x4096^2 split 2: 6.96 vs 7.39 us hot).
// * 128 columns: the A re-read matters less than the overlap. Unsplit, two math warpgroups
//   take alternate K blocks (one's promotion overlaps the other's wgmma) and sum in
//   warpgroup order: 3-6 % faster (192x4096^2: 12.40 vs 12.85 us); with a K split each CTA
//   has fewer K blocks and one warpgroup with N halves is 1-7 % faster.
// Two TMA issuer threads load alternate stages: 160x4096^2 into 11.62 / 11.80 us hot / cold vs
// 11.79 / 12.14, 256x4096^2 12.60 vs 12.90 hot, 64x51200x5120 78.6 vs 79.8 (session 21, two
// rounds; docs/perf/2026-12-02-s21/call5/). Not the 64 x 64 tile (within the noise).
template <int kIssuers>
int run_small_m_128(const GemmArgs& a) {
  return a.split == 1 ? run_sm90_fp8_gemm<SmallM<128, 6, false, 2, kIssuers>>(a)
                      : run_sm90_fp8_gemm<SmallM<128, 6, true, 1, kIssuers>>(a);
}

const ConfigEntry* small_m_configs(int* count) {
  static const ConfigEntry kConfigs[] = {
      {FP8GEMM_KIND_SMALL_M, 64, 32, 8, true, &run_sm90_fp8_gemm<SmallM<32, 8, false>>, true},
      {FP8GEMM_KIND_SMALL_M, 64, 64, 8, true, &run_sm90_fp8_gemm<SmallM<64, 8, false>>, true},
      {FP8GEMM_KIND_SMALL_M, 64, 128, 6, true, &run_small_m_128<2>, true},
      // The single-issuer version (stages + 100: a development key for A/Bs, never dispatched).
      {FP8GEMM_KIND_SMALL_M, 64, 128, 106, true, &run_small_m_128<1>, true},
      // Shallow rings for two or three CTAs per SM, each its own ring (two rings ingest ~1.8x
      // one: scripts/dev/ingest_bench.cu table 3). Development keys, never dispatched (session 29,
      // docs/PERF.md): 64 x 64 x 4 (~74 KB, 79 registers: three per SM) ran q|k|v at 33-64
      // tokens 4-10 % faster back to back, but the decode step at 48 / 64 sequences 1 % slower;
      // 64 x 64 x 6 (two per SM) had the best hot time at 128x4096^2 split 2 (7.81 vs 8.25 us),
      // slower cold.
      {FP8GEMM_KIND_SMALL_M, 64, 64, 4, true, &run_sm90_fp8_gemm<SmallM<64, 4, false>>, true},
      {FP8GEMM_KIND_SMALL_M, 64, 64, 6, true, &run_sm90_fp8_gemm<SmallM<64, 6, false>>, true},
      // The promotion overlapped across K blocks (one warpgroup, full-width wgmma, two block
      // accumulators; stages + 200: development keys, session 30).
      {FP8GEMM_KIND_SMALL_M, 64, 32, 208, true, &run_sm90_fp8_gemm<SmallM<32, 8, false, 1, 1, true>>, true},
      {FP8GEMM_KIND_SMALL_M, 64, 64, 208, true, &run_sm90_fp8_gemm<SmallM<64, 8, false, 1, 1, true>>, true},
      {FP8GEMM_KIND_SMALL_M, 64, 128, 206, true, &run_sm90_fp8_gemm<SmallM<128, 6, false, 1, 2, true>>, true},
  };
  *count = sizeof(kConfigs) / sizeof(kConfigs[0]);
  return kConfigs;
}

}  // namespace fp8gemm

// Timeline trace reader of this translation unit (builds with -DFP8GEMM_TRACE only).
FP8GEMM_TRACE_READER(fp8gemm_trace_read_small_m)
// Per-stage probe reader of this translation unit (builds with -DFP8GEMM_TRACE_STAGES only).
FP8GEMM_STAGE_READER(fp8gemm_stage_read_small_m)
