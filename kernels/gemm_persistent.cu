// Compiled configurations of the persistent schedule (kind FP8GEMM_KIND_PERSISTENT).
#include "fp8gemm/launch.cuh"
#include "fp8gemm/schedules/persistent.cuh"

namespace fp8gemm {

const ConfigEntry* persistent_configs(int* count) {
  static const ConfigEntry kConfigs[] = {
      // split_k = S > 1: the tiles of a partial last round run as S K ranges each (split tail,
      // tail_fixup.cuh). Both stage the output tile in shared memory for TMA stores (one ring stage fewer than
      // the direct-store versions, which they replaced: 2048x4096^2 65 vs 73 us, 4096^3 132 vs
      // 153; docs/PERF.md session 7). The dispatcher picks by waves (tiles vs SMs).
      {FP8GEMM_KIND_PERSISTENT, 256, 128, 3, true, &run_sm90_fp8_gemm<Persistent<2, 128, 3, 1, 2, true>>, false},
      // 128 x 128 x 5: two TMA issuer threads (alternate stages; 512x4096^2 into 17.93-18.09 vs
      // 18.45-18.56 us hot, docs/perf/2026-12-02-s21/call5/; not for the 256 x 128 tile: 2-5 %
      // slower) and K block i+1's wgmma overlapping K block i's promotion (mainloop_xpromote.cuh:
      // 608 -> 416 ns per K block, 2048x5120x8192 169.0 vs 177.2 us hot,
      // docs/perf/2026-12-02-s22/call1/).
      {FP8GEMM_KIND_PERSISTENT, 128, 128, 5, true, &run_sm90_fp8_gemm<Persistent<1, 128, 5, 1, 2, true, true, 2, true>>, false},
      // Without the overlap (stages + 100: a development key for A/Bs, never dispatched;
      // bench --dev-variant, tests/gpu_reliability.rs dev_variants_match_reference).
      {FP8GEMM_KIND_PERSISTENT, 128, 128, 105, true, &run_sm90_fp8_gemm<Persistent<1, 128, 5, 1, 2, true, true, 2>>, false},
  };
  *count = sizeof(kConfigs) / sizeof(kConfigs[0]);
  return kConfigs;
}

}  // namespace fp8gemm

// Timeline trace reader of this translation unit (builds with -DFP8GEMM_TRACE only).
FP8GEMM_TRACE_READER(fp8gemm_trace_read_persistent)
// Per-stage probe reader of this translation unit (builds with -DFP8GEMM_TRACE_STAGES only).
FP8GEMM_STAGE_READER(fp8gemm_stage_read_persistent)
