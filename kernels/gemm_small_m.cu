// Compiled configurations of the small-M schedule (kind FP8GEMM_KIND_SMALL_M).
#include "fp8gemm/launch.cuh"
#include "fp8gemm/schedules/small_m.cuh"

namespace fp8gemm {

// Main loops per tile width (harness sweeps, docs/PERF.md):
// * One math warpgroup with full-width wgmma and the promotion overlapped across K blocks
//   (K block i+1's wgmma runs in a second block accumulator while K block i is promoted;
//   mainloop_xpromote.cuh) for 64 and 128 columns (session 30: the 64x64 tile's K block was
//   its own wgmma + promotion chain, the data already there; 64x4096^2 split 2 5.66 / 6.67 vs
//   6.10 / 6.87 us, 128x4096^2 64x128 split 2 7.61 / 8.67 vs 8.33 / 8.84, 192x4096^2 64x128
//   10.48 / 11.20 vs 11.79 / 11.92). The 64-column tile's plain loop stays as development key
//   108 (bitwise equal: the same promotions in the same order).
// * 128 columns: the overlapped loop on an 8-stage ring at split 1-2 (the ring, not the
//   consumer, now sets the pace of long K loops; session 31, "into" hot / cold us vs 6 stages:
//   64x51200x5120 77.95 / 80.4-80.9 vs 80.05-80.25 / 82.6-83.1, 64x10240x5120 19.5-19.7 / 19.6-19.7
//   vs 20.0 / 19.9, 128x4096^2 split 2 cold 8.87-8.94 vs 9.17-9.21; 10 and 12 stages did not help
//   the 64-column tile). Workspace splits (>= 3) keep 6 stages (8 lost 0.5-0.9 us on down at
//   32-48 tokens, 67 K blocks per split) and take the N-halves loop (one half promoted while the
//   other's wgmma runs, session 9) when a split's K range is short (<= 32 K blocks: o at 33-64
//   tokens, 21; the decode step at 48 sequences 12.23-12.24 vs 12.30-12.31 ms TPOT with the
//   overlapped loop there), the overlapped loop otherwise (down at 32-48 tokens 0.3-0.8 us faster
//   than on the halves loop). The halves loop alone: development key 106 (bitwise equal).
// * 32 columns: the plain loop (the overlap measured a tie, 64x4096^2 8.53 vs 8.52 us).
// Two TMA issuer threads load alternate stages for 128 columns (session 21: 160x4096^2 11.62 /
// 11.80 vs 11.79 / 12.14 us; not the 64 x 64 tile: within the noise).
// The 64 x 128 tile on 6 stages: the N-halves loop for workspace splits of <= 32 K blocks, the
// overlapped loop otherwise (above).
int run_small_m_128x6(const GemmArgs& a) {
  const int kb_per_split = (a.k / kBlockK + a.split - 1) / a.split;
  if (a.split >= 3 && kb_per_split <= 32) return run_sm90_fp8_gemm<SmallM<128, 6, true, 2>>(a);
  return run_sm90_fp8_gemm<SmallM<128, 6, false, 2, true>>(a);
}

const ConfigEntry* small_m_configs(int* count) {
  static const ConfigEntry kConfigs[] = {
      {FP8GEMM_KIND_SMALL_M, 64, 32, 8, true, &run_sm90_fp8_gemm<SmallM<32, 8, false>>, true},
      {FP8GEMM_KIND_SMALL_M, 64, 64, 8, true, &run_sm90_fp8_gemm<SmallM<64, 8, false, 1, true>>, true},
      {FP8GEMM_KIND_SMALL_M, 64, 64, 108, true, &run_sm90_fp8_gemm<SmallM<64, 8, false>>, true},
      {FP8GEMM_KIND_SMALL_M, 64, 128, 8, true, &run_sm90_fp8_gemm<SmallM<128, 8, false, 2, true>>, true},
      {FP8GEMM_KIND_SMALL_M, 64, 128, 6, true, &run_small_m_128x6, true},
      {FP8GEMM_KIND_SMALL_M, 64, 128, 106, true, &run_sm90_fp8_gemm<SmallM<128, 6, true, 2>>, true},
      // Shallow rings for two or three CTAs per SM, each its own ring (two rings ingest ~1.8x
      // one: scripts/dev/ingest_bench.cu table 3). Development keys, never dispatched (session 29,
      // docs/PERF.md): 64 x 64 x 4 (~74 KB, 79 registers: three per SM) ran q|k|v at 33-64
      // tokens 4-10 % faster back to back, but the decode step at 48 / 64 sequences 1 % slower;
      // 64 x 64 x 6 (two per SM) had the best hot time at 128x4096^2 split 2 (7.81 vs 8.25 us),
      // slower cold.
      {FP8GEMM_KIND_SMALL_M, 64, 64, 4, true, &run_sm90_fp8_gemm<SmallM<64, 4, false>>, true},
      {FP8GEMM_KIND_SMALL_M, 64, 64, 6, true, &run_sm90_fp8_gemm<SmallM<64, 6, false>>, true},
      // Stream-K (split_k = CTAs per SM): the overlapped loops above, the tiles sharing the
      // (tile, K block) units of a resident grid; one CTA per SM (236 / 139 registers, ~193 /
      // ~129 KB). Development configurations, not dispatched (session 37, docs/PERF.md): q|k|v at
      // 48 / 64 tokens "into" 17.5 / 18.0 vs 19.2 / 19.6 µs hot, but the lone launch 20.9 / 21.4 vs
      // 16.8 / 17.1 and the decode step at 48 / 64 sequences +2.9 % / +1.5 % with them for q|k|v,
      // o and down (o / down 64: a tie / 0.1-1 µs slower); 64×4096² 7.8-8.8 vs 5.8. The trace:
      // a storer's fix-up (32 KB of partials from L2) ends 1.6-2.4 µs after its loop.
      {FP8GEMM_KIND_SMALL_M_STREAMK, 64, 128, 8, true,
       &run_sm90_fp8_gemm<SmallM<128, 8, false, 2, true, true>>, false},
      {FP8GEMM_KIND_SMALL_M_STREAMK, 64, 64, 8, true,
       &run_sm90_fp8_gemm<SmallM<64, 8, false, 1, true, true>>, false},
  };
  *count = sizeof(kConfigs) / sizeof(kConfigs[0]);
  return kConfigs;
}

}  // namespace fp8gemm

// Timeline trace reader of this translation unit (builds with -DFP8GEMM_TRACE only).
FP8GEMM_TRACE_READER(fp8gemm_trace_read_small_m)
// Per-stage probe reader of this translation unit (builds with -DFP8GEMM_TRACE_STAGES only).
FP8GEMM_STAGE_READER(fp8gemm_stage_read_small_m)
