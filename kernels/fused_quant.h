// candle-fp8 kernels: the elementwise work that feeds an FP8 GEMM, fused with the activation
// quantization (C ABI, same conventions as api.h: arguments validated, asynchronous launch on
// `stream`, never synchronizes, returns an fp8gemm_status code).
//
// Both kernels are launched with programmatic dependent launch (PDL): they let the next grid
// start at entry and wait (griddepcontrol.wait) for the previous grid before touching global
// memory. Their outputs q / sa follow the activation contract of fp8gemm_quantize_act
// (api.h): q [m, k] e4m3 row-major, sa [k/128][round_up(m, 4)] f32 MN-major; the padding rows
// of sa (m .. m_pad) are written as zeros, so sa needs no memset. All bf16 tensors are
// row-major and contiguous; every pointer must be 16-byte aligned.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// h = residual ? bf16(x + residual) : x          (written to x_sum_out when residual != NULL)
// y = bf16(rsqrt(mean(h^2) + eps) * h * gamma)    (bit-identical to candle 0.11's bf16 rmsnorm)
// q, sa = quantize(y)                             (bit-identical to fp8gemm_quantize_act on y)
// x, residual, x_sum_out: bf16 [m, k]; gamma: bf16 [k]. x_sum_out may be NULL only when
// residual is NULL. Requires m >= 1, k % 128 == 0, and k small enough for the row and gamma to
// fit in shared memory (k <= ~58K on H100/H200). gamma is read before the kernel waits for the
// previous one (PDL): it must be a model constant, not the output of a kernel still in flight.
// row_barrier: NULL, or FP8GEMM_NORM_BARRIER_WORDS * m zeroed u32 of device memory (4-byte
// aligned) that the kernel leaves zeroed again — then rows with k >= 1024 (m <=
// FP8GEMM_NORM_SPLIT_MAX_ROWS, k <= 65536) are each spread over 8 CTAs that exchange their
// partial sums through it (same bits). Launches sharing one barrier must be stream-ordered.
// One row only: measured faster at batch 1, slower from 4 rows on (docs/PERF.md session 13).
// flags: 0, or FP8GEMM_NORM_X_SETTLED: x is complete by the time the previous kernel in the
// stream passes its griddepcontrol.wait (e.g. x was written two or more launches back and the
// previous kernel is one of our GEMMs, which trigger their dependents only after waiting), so
// the kernel loads x before it waits, like gamma; the residual is still read after. A decode
// step's residual stream is such an x. Other bits: FP8GEMM_ERR_SHAPE.
#define FP8GEMM_NORM_BARRIER_WORDS 34
#define FP8GEMM_NORM_SPLIT_MAX_ROWS 1
#define FP8GEMM_NORM_X_SETTLED 1u
int32_t fp8gemm_add_rmsnorm_quant(const void* x, const void* residual, const void* gamma,
                                  float eps, void* x_sum_out, uint8_t* q, float* sa, int64_t m,
                                  int64_t k, uint32_t* row_barrier, uint32_t flags, void* stream);

// fp8gemm_add_rmsnorm_quant whose residual is a split-K GEMM output left unreduced
// (fp8gemm_gemm_unreduced): f32 partials [splits][m][k], added in split order and rounded to
// bf16 once (fp8gemm_reduce_partials' result), then added to x. x_sum_out is required.
int32_t fp8gemm_add_partials_rmsnorm_quant(const void* x, const float* partials, int32_t splits,
                                           const void* gamma, float eps, void* x_sum_out,
                                           uint8_t* q, float* sa, int64_t m, int64_t k,
                                           uint32_t* row_barrier, uint32_t flags, void* stream);

// gu: bf16 [m, 2 * inter], gate = columns [0, inter), up = [inter, 2 * inter).
// a = bf16(bf16(silu(gate)) * up)   (bit-identical to candle 0.11's bf16 silu then mul)
// q, sa = quantize(a) with k = inter. Requires m >= 1, inter % 128 == 0.
int32_t fp8gemm_swiglu_quant(const void* gu, int64_t m, int64_t inter, uint8_t* q, float* sa,
                             void* stream);

#ifdef __cplusplus
}
#endif
