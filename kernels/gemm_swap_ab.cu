// Compiled configurations of the swap-AB schedule (kind FP8GEMM_KIND_SWAP_AB):
// block_m = tokens per tile (wgmma N), block_n = weight rows per tile (wgmma M).
#include "fp8gemm/launch.cuh"
#include "fp8gemm/schedules/swap_ab.cuh"

namespace fp8gemm {

const ConfigEntry* swap_ab_configs(int* count) {
  static const ConfigEntry kConfigs[] = {
      {FP8GEMM_KIND_SWAP_AB, 8, 64, 8, true, &run_sm90_fp8_gemm<SwapAB<8, 8>>, true},
      {FP8GEMM_KIND_SWAP_AB, 16, 64, 8, true, &run_sm90_fp8_gemm<SwapAB<16, 8>>, true},
      {FP8GEMM_KIND_SWAP_AB, 32, 64, 8, true, &run_sm90_fp8_gemm<SwapAB<32, 8>>, true},
      {FP8GEMM_KIND_SWAP_AB, 64, 64, 8, true, &run_sm90_fp8_gemm<SwapAB<64, 8>>, true},
  };
  *count = sizeof(kConfigs) / sizeof(kConfigs[0]);
  return kConfigs;
}

}  // namespace fp8gemm
