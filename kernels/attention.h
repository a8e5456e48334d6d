// candle-fp8 kernels: the decode-step attention of a grouped-query model (one new token per
// sequence), C ABI. Status codes are those of api.h (fp8gemm_status_string names them).
//
// Every entry point validates its arguments, launches asynchronously on `stream` with
// programmatic dependent launch (PDL), never synchronizes, and returns a status code.
//
// Layouts (all bf16 tensors contiguous, row-major; d = head_dim = 128):
//   qkv      [batch, (hq + 2*hkv) * d]   q heads, then k heads, then v heads
//   qk_norm  [hq + hkv, d]               per-head RMSNorm weights (q rows, then k rows)
//   cos/sin  [d/2]                       RoPE table rows of the new position (rotate-half)
//   q        [batch, hq, d]              normalized, roped query
//   k/v cache[batch, hkv, cap, d]        position p of head g of sequence b at ((b*hkv+g)*cap+p)*d
//   qa       [batch, hq*d]               e4m3, the o-projection's quantized activation
//   sa       [hq][m_pad]                 f32 scales, MN-major, m_pad = round_up(batch, 4)
//   out      [batch, hq*d]               bf16 attention output (optional)
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Per q and k head of each sequence: RMSNorm over d (f32 sum of squares, bf16 result), times
// the head's qk_norm row (bf16), then RoPE with `cos_row`/`sin_row` (the d/2 table values of
// the new token's position; bf16 arithmetic: x1*c - x2*s, x1*s + x2*c) — candle's rms_norm,
// broadcast_mul and rope_thd rounding points. Normalized q goes to `q_out`; k and v (v
// unchanged) are written at position `offset` of the caches. Requires head_dim == 128,
// hq % hkv == 0, 0 <= offset < cap, 16-byte aligned pointers. qk_norm, cos_row and sin_row are
// read before the kernel waits for the previous one (PDL): they must be model constants, not
// outputs of kernels still in flight.
int32_t fp8gemm_qk_norm_rope_append(const void* qkv, const void* qk_norm, const void* cos_row,
                                    const void* sin_row, void* q_out, void* k_cache,
                                    void* v_cache, int64_t batch, int64_t hq, int64_t hkv,
                                    int64_t head_dim, int64_t cap, int64_t offset, float eps,
                                    void* stream);

// Bytes of workspace fp8gemm_decode_attention needs for `splits` position splits (0 when
// splits <= 1).
size_t fp8gemm_decode_attention_workspace_bytes(int64_t batch, int64_t hq, int64_t splits);

// Decode attention: for each sequence b and kv head g, its hq/hkv query heads attend over cache
// positions [0, len) (q already carries the 1/sqrt(d) scale): f32 scores, max-subtracted f32
// softmax, f32 P·V. Positions are split into `splits` ranges (clamped to [1, ceil(len/32)];
// with more than one, partial results go to `workspace` and a second kernel combines them).
// Each head's 128 outputs are then written as
//   - `qa`/`sa` (when qa != NULL): quantized exactly like fp8gemm_quantize_act (amax with NaN
//     propagation, s = max(amax, 1e-4) / 448, q = e4m3(x / s)), head h of row b in column
//     block h: sa[h * m_pad + b]. Padding rows b in [batch, m_pad) of sa are set to zero.
//   - `out` (when out != NULL): bf16.
// At least one of qa / out must be given; sa is required with qa. Cache positions before
// len - 1 are read before the kernel waits for the previous one (PDL): only q and position
// len - 1 may come from the kernel just before (qk_norm_rope_append, as in a decode step). Requires head_dim == 128,
// hq % hkv == 0, hq / hkv <= 16, 1 <= len <= cap, 16-byte aligned pointers.
int32_t fp8gemm_decode_attention(const void* q, const void* k_cache, const void* v_cache,
                                 int64_t batch, int64_t hq, int64_t hkv, int64_t head_dim,
                                 int64_t cap, int64_t len, int64_t splits, void* workspace,
                                 size_t workspace_bytes, uint8_t* qa, float* sa, void* out,
                                 void* stream);

// A whole decode step's attention in one launch: fp8gemm_qk_norm_rope_append (q, k of the new
// token normalized, weighted and roped; k and v appended at position `offset` of the caches)
// fused into fp8gemm_decode_attention over positions [0, offset + 1). q never goes to global
// memory; each CTA normalizes its own query heads from qkv, and the CTAs that attend to the new
// position compute its k and v themselves (one of them appends them). The kv head's hq/hkv
// query heads are spread over `head_splits` CTAs (a divisor of hq/hkv): more CTAs per kv head
// without a combine pass, since each CTA attends over all positions of its split for its own
// heads. Position splits are merged without a second launch:
//   - counters != NULL ("tail merge"): every split writes the workspace (size it with
//     fp8gemm_decode_attention_workspace_bytes), and the last split of each (kv head, head
//     split, sequence) to finish merges them. `counters`: batch * hkv * head_splits uint32
//     that are zero before the launch; the kernel leaves them zero (reuse them, stream-ordered).
//   - counters == NULL: up to 8 splits are merged inside a cluster of the splits' CTAs (through
//     distributed shared memory, no workspace); more take the workspace and the combine kernel
//     as fp8gemm_decode_attention does (0 workspace bytes suffice for splits <= 8).
// Outputs and
// `splits` as fp8gemm_decode_attention; the result is bit-identical
// to fp8gemm_qk_norm_rope_append followed by fp8gemm_decode_attention with the same `splits`,
// whatever head_splits. qk_norm, cos_row, sin_row and cache positions before `offset` are read
// before the kernel waits for the previous one (PDL): only qkv may come from the kernel just
// before. Requires head_dim == 128, hq % hkv == 0, hq / hkv <= 16, 0 <= offset < cap,
// 16-byte aligned pointers.
int32_t fp8gemm_decode_step_attention(const void* qkv, const void* qk_norm, const void* cos_row,
                                      const void* sin_row, void* k_cache, void* v_cache,
                                      int64_t batch, int64_t hq, int64_t hkv, int64_t head_dim,
                                      int64_t cap, int64_t offset, float eps, int64_t splits,
                                      int64_t head_splits, void* workspace,
                                      size_t workspace_bytes, uint32_t* counters, uint8_t* qa,
                                      float* sa, void* out, void* stream);

#ifdef __cplusplus
}
#endif
