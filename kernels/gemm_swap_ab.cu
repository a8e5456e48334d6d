// Compiled configurations of the swap-AB schedule (kind FP8GEMM_KIND_SWAP_AB):
// block_m = tokens per tile (wgmma N), block_n = weight rows per tile (wgmma M).
#include "fp8gemm/launch.cuh"
#include "fp8gemm/schedules/swap_ab.cuh"

namespace fp8gemm {

const ConfigEntry* swap_ab_configs(int* count) {
  static const ConfigEntry kConfigs[] = {
      {FP8GEMM_KIND_SWAP_AB, 8, 64, 8, true, &run_sm90_fp8_gemm<SwapAB<8, 8>>, true},
      // 16 tokens: one full-width m64n16 wgmma per K block. Two m64n8 halves (one promoted
      // while the other runs) each read the 64-row weight tile from shared memory: decode b16
      // 10.58 -> 10.43 ms (docs/PERF.md, session 10).
      {FP8GEMM_KIND_SWAP_AB, 16, 64, 8, true, &run_sm90_fp8_gemm<SwapAB<16, 8, 0, false>>, true},
      // 7 stages: three CTAs per SM (~73 KB each) for wide N (>= 3 waves of tiles).
      {FP8GEMM_KIND_SWAP_AB, 16, 64, 7, true, &run_sm90_fp8_gemm<SwapAB<16, 7, 0, false>>, true},
      {FP8GEMM_KIND_SWAP_AB, 32, 64, 8, true, &run_sm90_fp8_gemm<SwapAB<32, 8>>, true},
      {FP8GEMM_KIND_SWAP_AB, 64, 64, 8, true, &run_sm90_fp8_gemm<SwapAB<64, 8>>, true},
      // Stream-K (split_k = CTAs per SM): the same tiles sharing (tile, K block) units evenly.
      {FP8GEMM_KIND_SWAP_AB_STREAMK, 8, 64, 8, true,
       &run_sm90_fp8_gemm<SwapAB<8, 8, 0, true, false, true>>, false},
      {FP8GEMM_KIND_SWAP_AB_STREAMK, 16, 64, 8, true,
       &run_sm90_fp8_gemm<SwapAB<16, 8, 0, false, false, true>>, false},
      {FP8GEMM_KIND_SWAP_AB_STREAMK, 16, 64, 7, true,
       &run_sm90_fp8_gemm<SwapAB<16, 7, 0, false, false, true>>, false},
      {FP8GEMM_KIND_SWAP_AB_STREAMK, 32, 64, 8, true,
       &run_sm90_fp8_gemm<SwapAB<32, 8, 0, true, false, true>>, false},
      // 5 stages (~63 KB): three CTAs per SM of the 32-token tile.
      {FP8GEMM_KIND_SWAP_AB_STREAMK, 32, 64, 5, true,
       &run_sm90_fp8_gemm<SwapAB<32, 5, 0, true, false, true>>, false},
      // (Not 64 tokens: 64 x 64 x 6, two per SM, tied q|k|v 64 and ran 1.5-1.9x slower elsewhere,
      // e.g. 128x5120x25600 "into" 79.5 vs 45.6 us: two token tiles stream the weights twice;
      // session 37, docs/perf/2026-12-04-s37/call2.)
  };
  *count = sizeof(kConfigs) / sizeof(kConfigs[0]);
  return kConfigs;
}

// The same 8-token tile quantizing its bf16 activation itself (kQuantIn, quant_operand.cuh):
// fp8gemm_gemm_quant_in, the full linear at 1-8 tokens in one launch. 7 stages: each also
// stages the bf16 tile (2 KB), and 8 would not leave three CTAs per SM.
const ConfigEntry* swap_ab_quant_in_configs(int* count) {
  static const ConfigEntry kConfigs[] = {
      {FP8GEMM_KIND_SWAP_AB, 8, 64, 7, true, &run_sm90_fp8_gemm<SwapAB<8, 7, 0, true, true>>, true},
  };
  *count = sizeof(kConfigs) / sizeof(kConfigs[0]);
  return kConfigs;
}

// The gated variants (gate/up GEMM with the SwiGLU + quantization epilogue,
// fp8gemm_gemm_swiglu_quant): block_m = tokens, block_n = weight rows per tile (gate + up).
// 64 rows (32 features, 4-CTA clusters) keeps the plain decode tile's footprint: 8 stages,
// ~74 KB, three CTAs per SM. 128 rows (64 features, 2-CTA clusters), 4 stages: the default, the
// fastest in the decode step, yet slower there than the plain GEMM + fp8gemm_swiglu_quant
// (docs/PERF.md, session 6: the cluster launch and the epilogue's latency cost more than the
// launch they save).
const ConfigEntry* swiglu_configs(int* count) {
  static const ConfigEntry kConfigs[] = {
      {FP8GEMM_KIND_SWAP_AB, 8, 64, 8, false, &run_sm90_fp8_gemm<SwapAB<8, 8, 32>>, false},
      {FP8GEMM_KIND_SWAP_AB, 16, 64, 8, false, &run_sm90_fp8_gemm<SwapAB<16, 8, 32>>, false},
      {FP8GEMM_KIND_SWAP_AB, 8, 64, 6, false, &run_sm90_fp8_gemm<SwapAB<8, 6, 32>>, false},
      {FP8GEMM_KIND_SWAP_AB, 16, 64, 6, false, &run_sm90_fp8_gemm<SwapAB<16, 6, 32>>, false},
      {FP8GEMM_KIND_SWAP_AB, 8, 128, 4, false, &run_sm90_fp8_gemm<SwapAB<8, 4, 64>>, false},
      {FP8GEMM_KIND_SWAP_AB, 16, 128, 4, false, &run_sm90_fp8_gemm<SwapAB<16, 4, 64>>, false},
      // 256 rows (a whole 128-feature group per CTA: no cluster), 3 stages (~100 KB: two CTAs
      // per SM, so Qwen3-32B's 200 gate/up tiles are all resident at once).
      {FP8GEMM_KIND_SWAP_AB, 8, 256, 3, false, &run_sm90_fp8_gemm<SwapAB<8, 3, 128>>, false},
      {FP8GEMM_KIND_SWAP_AB, 16, 256, 3, false, &run_sm90_fp8_gemm<SwapAB<16, 3, 128, false>>, false},
  };
  *count = sizeof(kConfigs) / sizeof(kConfigs[0]);
  return kConfigs;
}

}  // namespace fp8gemm

// Timeline trace reader of this translation unit (builds with -DFP8GEMM_TRACE only).
FP8GEMM_TRACE_READER(fp8gemm_trace_read_swap_ab)
// Per-stage probe reader of this translation unit (builds with -DFP8GEMM_TRACE_STAGES only).
FP8GEMM_STAGE_READER(fp8gemm_stage_read_swap_ab)
