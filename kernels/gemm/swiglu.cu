// The gated gate/up GEMM of the MLP (fp8gemm_gemm_swiglu_quant, gemm/gemm.cu): swap-AB tiles of
// 16 tokens x 256 weight rows (128 gate rows and the up rows of the same features: a whole
// quantization group per CTA, no cluster) with the SwiGLU + quantization epilogue
// (epilogue/swiglu.cuh). 3 stages (~100 KB): two CTAs per SM, so Qwen3-32B's 200 gate/up tiles
// are all resident at once. Faster in the decode step at 9-16 tokens than the GEMM followed by
// fp8gemm_swiglu_quant; the 16-token tile serves 1-8 tokens too (rows past m are masked).
#include "fp8gemm/impls/launch.cuh"
#include "fp8gemm/impls/swap_ab.cuh"

namespace fp8gemm {

struct SwiGlu16x256S3 {
  static constexpr int kTokens = 16, kStages = 3;
  static constexpr bool kHalves = false, kStreamK = false, kGated = true;
};

int run_gemm_swiglu_quant(const GemmArgs& a) { return run_sm90_fp8_gemm<SwapAB<SwiGlu16x256S3>>(a); }

}  // namespace fp8gemm

// Timeline trace reader of this translation unit (builds with -DFP8GEMM_TRACE only).
FP8GEMM_TRACE_READER(fp8gemm_trace_read_swiglu)
// Per-stage probe reader of this translation unit (builds with -DFP8GEMM_TRACE_STAGES only).
FP8GEMM_STAGE_READER(fp8gemm_stage_read_swiglu)
