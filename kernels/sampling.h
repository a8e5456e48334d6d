// candle-fp8 kernels: greedy sampling, C ABI (same conventions as api.h: arguments validated,
// asynchronous launch on `stream` with programmatic dependent launch, never synchronizes,
// returns an fp8gemm_status code).
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// out[r] = argmax over c in [0, cols) of x[r * row_stride + c], for r in [0, rows), on f32 or
// bf16 logits (x_dtype: FP8GEMM_F32 or FP8GEMM_BF16 of api.h; every bf16 value converts exactly
// to f32, so bf16 logits need no f32 copy): the semantics of candle 0.11's CPU argmax, which
// scans left to right and replaces its candidate only when `candidate < x[c]`:
//   - ties: the first (smallest) index of the maximum (-0.0 and +0.0 are equal);
//   - NaN:  a NaN at column 0 makes the answer 0; a NaN anywhere else is skipped;
//   - a row of -inf (or of NaN) gives 0.
// (candle's CUDA argmax differs on both: ties and NaNs resolve by thread layout.)
// Requires 1 <= rows < 2^31, 1 <= cols < 2^31, row_stride >= 0, x aligned to its element size
// and out 4-byte aligned (FP8GEMM_ERR_ALIGN otherwise; rows need not be 16-byte aligned);
// FP8GEMM_ERR_DTYPE for another dtype code.
int32_t fp8gemm_argmax_rows(const void* x, int32_t x_dtype, int64_t rows, int64_t cols,
                            int64_t row_stride, uint32_t* out, void* stream);

#ifdef __cplusplus
}
#endif
