// candle-fp8 kernels: the one C ABI between the CUDA code in kernels/ and everything that calls
// it (the Rust crate through src/cuda/ffi.rs, and the dev harness through ctypes).
//
// Every entry point validates its arguments, launches asynchronously on `stream`
// (a cudaStream_t / CUstream, passed as void*), never synchronizes, and returns a status
// code (0 = success). fp8gemm_status_string() names a code. Kernels that follow another in a
// decode step are launched with programmatic dependent launch (PDL): they may start while the
// previous kernel of the stream finishes and wait (griddepcontrol.wait) before they read its
// outputs; inputs read before that wait are named below.
//
// Layouts (the numeric contract, see docs/design.md):
//   x       [m, k]        bf16 or f32, row-major
//   q       [m, k]        e4m3 (fn) bytes, row-major
//   sa      [kb][m_pad]   f32, MN-major: element (row, kblock) at sa[kblock * m_pad + row],
//                         kb = ceil(k / 128), m_pad = round_up(m, 4); base 16-byte aligned
//   w       [n, k]        e4m3 (fn) bytes, row-major
//   sw      [nb][kb]      f32, row-major, nb = ceil(n / 128)
// When k % 128 != 0 the last K group / block is partial: its scale covers its k % 128 columns.
//   y       [m, n]        bf16, row-major
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// ---- Status codes, dtypes, GEMM configurations ----------------------------------------------

enum fp8gemm_status {
  FP8GEMM_OK = 0,
  FP8GEMM_ERR_SHAPE = 1,      // a dimension is zero, negative, or breaks a divisibility rule
  FP8GEMM_ERR_ALIGN = 2,      // a pointer is not 16-byte aligned
  FP8GEMM_ERR_CONFIG = 3,     // the requested schedule/config is not compiled in (or none given)
  FP8GEMM_ERR_DEVICE = 4,     // the current device is not sm_90 (Hopper)
  FP8GEMM_ERR_TMA = 5,        // cuTensorMapEncodeTiled failed (or could not be loaded)
  FP8GEMM_ERR_LAUNCH = 6,     // a CUDA runtime call or kernel launch failed
  FP8GEMM_ERR_WORKSPACE = 7,  // the workspace is missing or too small for this config
  FP8GEMM_ERR_DTYPE = 8,      // an unsupported dtype code
};

// Input dtypes for activation quantization and argmax.
enum fp8gemm_dtype { FP8GEMM_BF16 = 0, FP8GEMM_F32 = 1 };

// Schedule kinds. The Rust dispatcher (src/dispatch.rs, `choose_config`) chooses one; the
// kernels check that the (kind, block sizes, stages) combination is one they compile. The
// compiled set is exactly what that rule can return:
//   SMALL_M          (64, 64, 8), (64, 128, 8), (64, 128, 6)
//   SWAP_AB          (8, 64, 8), (16, 64, 8), (32, 64, 8)
//   WARP_SPEC        (128, 128, 6)
//   PERSISTENT       (256, 128, 3), (128, 128, 5)
//   SWAP_AB_STREAMK  (16, 64, 8), (16, 64, 7), (32, 64, 5)
enum fp8gemm_kind {
  FP8GEMM_KIND_SMALL_M = 1,      // single-partition multistage, one CTA per output tile
  FP8GEMM_KIND_SWAP_AB = 2,      // transposed: W rows on the wgmma M side, tokens on N
  FP8GEMM_KIND_WARP_SPEC = 3,    // non-persistent warp-specialized
  FP8GEMM_KIND_PERSISTENT = 4,   // persistent warp-specialized, 2 math warpgroups
  FP8GEMM_KIND_SWAP_AB_STREAMK = 5,  // swap-AB tiles, stream-K: the (tile, K block) units split
                                     // evenly over a resident grid, partial tiles summed in the
                                     // kernel; split_k = CTAs per SM (workspace: as PERSISTENT's)
};

typedef struct fp8gemm_config {
  int32_t kind;     // enum fp8gemm_kind
  int32_t block_m;  // tile rows of y (for SWAP_AB: tokens per tile)
  int32_t block_n;  // tile columns of y (for SWAP_AB: weight rows per tile)
  int32_t stages;   // shared-memory pipeline depth
  int32_t split_k;  // 1 = no split; > 1 needs a workspace (fp8gemm_workspace_bytes). PERSISTENT:
                    // the K ranges of each tile of a partial last round (split tail, summed in
                    // the kernel; clamped to one round of CTAs, none when the rounds are full).
                    // SWAP_AB_STREAMK: CTAs per SM of the grid (clamped to what fits)
  int32_t num_sms;  // SMs a persistent grid may use (0 = all)
} fp8gemm_config;

// Human-readable name of a status code (static string).
const char* fp8gemm_status_string(int32_t status);

// The compiled configurations (split_k = 1 for those that cannot split, 0 for those that can;
// num_sms = 0): writes min(count, capacity) entries to `out` (may be NULL when capacity is 0)
// and returns the count. For tuning tools (examples/bench.rs --sweep).
int32_t fp8gemm_compiled_configs(fp8gemm_config* out, int32_t capacity);

// ---- GEMM family (kernels/gemm/) --------------------------------------------------------------

// Per-token, per-128-column activation quantization, one pass:
//   s = max(amax, 1e-4) / 448, q = cvt.rn.satfinite.e4m3(x / s); scales written MN-major.
// Requires k % 8 == 0 (whole 16-byte vectors of x per row); when k % 128 != 0 the last group of
// a row is partial: its amax is over its valid columns, codes are written for those only. Rows
// of sa between m and m_pad are set to zero.
int32_t fp8gemm_quantize_act(const void* x, int32_t x_dtype, uint8_t* q, float* sa,
                             int64_t m, int64_t k, void* stream);

// Bytes of workspace fp8gemm_gemm needs for this config and shape (0 when none, and when `cfg`
// is NULL).
size_t fp8gemm_workspace_bytes(const fp8gemm_config* cfg, int64_t m, int64_t n, int64_t k);

// y = blocked-FP8 GEMM (two-level accumulation, both scales applied every 128-wide K block)
// with the configuration `cfg` (required: NULL or an uncompiled one is FP8GEMM_ERR_CONFIG).
// Requires k >= 16, k % 16 == 0 (TMA row strides), n >= 16, n % 16 == 0, m >= 1. When
// k % 128 != 0 the last K block is partial: TMA fills its columns past k with zeros (in qa and
// w), and it is promoted with its own scales sa[.][kb-1], sw[.][kb-1]. `workspace` may be NULL when
// fp8gemm_workspace_bytes() returns 0. PERSISTENT with a split tail (split_k > 1) and
// SWAP_AB_STREAMK: the workspace starts with a 4 KiB page of flags that must be zero when the
// buffer is first used and that every launch leaves zero; give these launches a buffer of their
// own (allocated zeroed), never one that other configurations write their split-K partials into.
int32_t fp8gemm_gemm(const uint8_t* qa, const float* sa, const uint8_t* w, const float* sw,
                     void* y, int64_t m, int64_t n, int64_t k, const fp8gemm_config* cfg,
                     void* workspace, size_t workspace_bytes, void* stream);

// fp8gemm_gemm without the split-K reduction: when the configuration reduces through the
// workspace (fp8gemm_workspace_bytes() > 0), the kernel leaves the f32 partial sums there,
// laid out [splits][m][n] with splits = bytes / (4 m n), and nothing else is launched; the
// consumer adds them in split order (as fp8gemm_reduce_partials does) — on the decode path that
// is the next fused kernel, one launch fewer. `y` may be NULL in that case; otherwise y is
// written exactly as by fp8gemm_gemm.
int32_t fp8gemm_gemm_unreduced(const uint8_t* qa, const float* sa, const uint8_t* w,
                               const float* sw, void* y, int64_t m, int64_t n, int64_t k,
                               const fp8gemm_config* cfg, void* workspace, size_t workspace_bytes,
                               void* stream);

// The MLP's gate/up GEMM with SiLU * up and the down projection's activation quantization
// in its epilogue (decode sizes; one launch instead of a GEMM and fp8gemm_swiglu_quant):
//   gu      = blocked-FP8 GEMM of (qa, sa) with w = [gate; up] ([2 * inter, k], sw as usual)
//   h       = bf16(bf16(silu(bf16 gu[:, :inter])) * bf16 gu[:, inter:])   (candle's roundings)
//   q, sa_q = quantize(h): q [m, inter] e4m3, sa_q [inter/128][m_pad] f32 (padding rows zeroed)
// Bit-identical to fp8gemm_gemm without K split followed by fp8gemm_swiglu_quant. Requires
// 1 <= m <= 16, inter % 128 == 0, k >= 16, k % 16 == 0 (a partial last K block as in
// fp8gemm_gemm). One compiled variant: 16-token tiles of 256
// weight rows (a whole 128-feature group per CTA, no cluster), 3 stages.
int32_t fp8gemm_gemm_swiglu_quant(const uint8_t* qa, const float* sa, const uint8_t* w,
                                  const float* sw, int64_t m, int64_t inter, int64_t k,
                                  uint8_t* q, float* sa_q, void* stream);

// Grouped GEMM of a mixture-of-experts layer, one launch for every expert: expert e's tokens
// times its weight, each row as fp8gemm_gemm computes it without K split, on a resident grid.
// block_tokens: 8, 16, 32 or 64 = swap-AB tiles of 64 weight rows x that many tokens (decode
// sizes); 128 = tokens-on-M tiles of 128 tokens x 128 weight rows (prefill sizes).
//   w       [groups * n, k]                  e4m3, the experts' [n, k] weights stacked
//   sw      [groups * n / 128][kb]           f32, their scales stacked
//   counts  [groups]                         u32 tokens per expert, device memory; read after
//                                            griddepcontrol.wait (the previous kernel may write
//                                            them; a graph may replay the launch with new ones)
// Masked (max_m >= 1, rows = groups * max_m): expert e's tokens are rows e * max_m ..
// e * max_m + counts[e] of qa [rows, k]; sa is per expert [kb][round_up(max_m, 4)]
// (expert-major, groups * kb * round_up(max_m, 4) floats); y [rows, n]. A count above max_m is
// taken as max_m. Rows at or past an expert's count are written as zeros; qa and sa there may
// hold anything (NaN included).
// Contiguous (max_m = 0): expert e's tokens follow expert e - 1's in qa [rows, k]; sa
// [kb][round_up(rows, 4)] as fp8gemm_gemm's; y [rows, n]. Counts summing past `rows` are cut at
// `rows`; the rows past their sum are written as zeros.
// Requires groups >= 1, n % 128 == 0, k >= 16, k % 16 == 0 (a partial last K block as in
// fp8gemm_gemm), rows >= 1, 16-byte aligned qa, sa, w, y (sw, counts: 4). w and sw are read
// only after the wait too (which experts run is known only then).
int32_t fp8gemm_grouped_gemm(const uint8_t* qa, const float* sa, const uint8_t* w,
                             const float* sw, void* y, const uint32_t* counts, int64_t groups,
                             int64_t max_m, int64_t rows, int64_t n, int64_t k,
                             int32_t block_tokens, void* stream);

// fp8gemm_grouped_gemm of the experts' gate/up weights with the SwiGLU epilogue of
// fp8gemm_gemm_swiglu_quant (each expert's w = [gate; up], [2 * inter, k], stacked as
// [groups * 2 * inter, k]): q = quantize(bf16(silu(gate)) * up) [rows, inter] e4m3 and its scales
// sa_q, the operand of the grouped down projection in the same layout:
//   masked      sa_q [groups][inter / 128][round_up(max_m, 4)]
//   contiguous  sa_q [inter / 128][round_up(rows, 4)]
// Each token row below its expert's count is bit-identical to fp8gemm_grouped_gemm (n = 2 * inter)
// followed by fp8gemm_swiglu_quant of that row; the rows at or past the counts of q and sa_q
// (and the padding rows of sa_q) are left as they were. 16-token tiles of 256 weight rows.
// Requires inter % 128 == 0 and the rest as fp8gemm_grouped_gemm (q 1-byte, sa_q 4-byte aligned).
int32_t fp8gemm_grouped_gemm_swiglu_quant(const uint8_t* qa, const float* sa, const uint8_t* w,
                                          const float* sw, const uint32_t* counts, int64_t groups,
                                          int64_t max_m, int64_t rows, int64_t inter, int64_t k,
                                          uint8_t* q, float* sa_q, void* stream);

// y[m, n] (bf16) = bf16(sum over s of partials[s][m][n]), added in split order: the reduction
// fp8gemm_gemm runs after a workspace split. n % 16 == 0, 16-byte aligned pointers.
int32_t fp8gemm_reduce_partials(const float* partials, void* y, int64_t m, int64_t n,
                                int32_t splits, void* stream);

// Dequantize a blocked-FP8 weight to bf16: out[n][k] = w[n][k] * sw[n/128][k/128]
// (any n, k; partial blocks allowed). Used by the dequant provider.
int32_t fp8gemm_dequant_weight(const uint8_t* w, const float* sw, void* out, int64_t n,
                               int64_t k, void* stream);

// ---- Fused elementwise + quantization (kernels/fused/) -----------------------------------------
// The elementwise work that feeds an FP8 GEMM, fused with the activation quantization. Outputs
// q / sa follow the activation contract of fp8gemm_quantize_act: q [m, k] e4m3 row-major,
// sa [ceil(k/128)][round_up(m, 4)] f32 MN-major (a partial last group when k % 128 != 0, as
// there); the padding rows of sa (m .. m_pad) are written as zeros, so sa needs no memset. All
// bf16 tensors are row-major and contiguous; every pointer must be 16-byte aligned.

// h = residual ? bf16(x + residual) : x          (written to x_sum_out when residual != NULL)
// y = bf16(rsqrt(mean(h^2) + eps) * h * gamma)    (bit-identical to candle 0.11's bf16 rmsnorm)
// q, sa = quantize(y)                             (bit-identical to fp8gemm_quantize_act on y)
// x, residual, x_sum_out: bf16 [m, k]; gamma: bf16 [k]. x_sum_out may be NULL only when
// residual is NULL. Requires m >= 1, k % 8 == 0, and k small enough for the row and gamma to
// fit in shared memory (k <= ~58K on H100/H200). gamma is read before the kernel waits for the
// previous one (PDL): it must be a model constant, not the output of a kernel still in flight.
// row_barrier: NULL, or FP8GEMM_NORM_BARRIER_WORDS * m zeroed u32 of device memory (4-byte
// aligned) that the kernel leaves zeroed again — then rows with k >= 1024 (m <=
// FP8GEMM_NORM_SPLIT_MAX_ROWS, k <= 65536, k % 128 == 0; other rows leave it unused) are each
// spread over 8 CTAs that exchange their partial sums through it (same bits). Launches sharing one barrier must be stream-ordered.
// One row only: measured faster at batch 1, slower from 4 rows on.
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
// q, sa = quantize(a) with k = inter. Requires m >= 1, inter % 8 == 0 (a partial last group
// when inter % 128 != 0).
int32_t fp8gemm_swiglu_quant(const void* gu, int64_t m, int64_t inter, uint8_t* q, float* sa,
                             void* stream);

// ---- Decode attention (kernels/attention/) ------------------------------------------------------
// The decode-step attention of a grouped-query model (one new token per sequence).
// Layouts (all bf16 tensors contiguous, row-major; d = head_dim, 64 or 128):
//   qkv      [batch, (hq + 2*hkv) * d]   q heads, then k heads, then v heads
//   qk_norm  [hq + hkv, d]               per-head weights (q rows, then k rows): the RMSNorm
//                                        weights, or ones without a q/k norm; any attention
//                                        scale folded into the q rows
//   cos/sin  [d/2]                       RoPE table rows of the new position (rotate-half)
//   q        [batch, hq, d]              normalized (or weighted), roped query
//   k/v cache[batch, hkv, cap, d]        position p of head g of sequence b at ((b*hkv+g)*cap+p)*d
//   qa       [batch, hq*d]               e4m3, the o-projection's quantized activation (d = 128)
//   sa       [hq][m_pad]                 f32 scales, MN-major, m_pad = round_up(batch, 4)
//   out      [batch, hq*d]               bf16 attention output (optional at d = 128)
// At d = 64 a 128-wide quantization group spans two heads, which need not be in one CTA (GQA 3:
// a kv head's three query heads): the attention entry points take qa == NULL and write `out`;
// the caller quantizes it with fp8gemm_quantize_act (k = hq * 64; one launch more).

// flags of the decode-step entry points: FP8GEMM_ATTN_NO_QK_NORM = q and k are not
// RMS-normalized (Llama, Qwen2): each value is only multiplied by its qk_norm weight (one bf16
// rounding, candle's broadcast_mul), then roped. Other bits: FP8GEMM_ERR_SHAPE.
#define FP8GEMM_ATTN_NO_QK_NORM 1u

// Per q and k head of each of the `tokens` new tokens of each sequence (qkv rows
// [batch * tokens, (hq + 2 hkv) * d], token i of sequence b in row b * tokens + i, at position
// offset + i): RMSNorm over d (f32 sum of squares, bf16 result; skipped with
// FP8GEMM_ATTN_NO_QK_NORM), times the head's qk_norm row (bf16), then RoPE with row i of
// `cos_row`/`sin_row` ([tokens, d/2] table values of the positions; bf16 arithmetic:
// x1*c - x2*s, x1*s + x2*c) — candle's rms_norm, broadcast_mul and rope_thd rounding points.
// Normalized q goes to `q_out` [batch * tokens, hq, d]; k and v (v unchanged) are written at
// positions offset + i of the caches. Requires head_dim 64 or 128, hq % hkv == 0,
// 0 <= offset, offset + tokens <= cap, 16-byte aligned pointers. qk_norm, cos_row and sin_row
// are read before the kernel waits for the previous one (PDL): they must be model constants,
// not outputs of kernels still in flight.
int32_t fp8gemm_qk_norm_rope_append(const void* qkv, const void* qk_norm, const void* cos_row,
                                    const void* sin_row, void* q_out, void* k_cache,
                                    void* v_cache, int64_t batch, int64_t tokens, int64_t hq,
                                    int64_t hkv, int64_t head_dim, int64_t cap, int64_t offset,
                                    float eps, uint32_t flags, void* stream);

// Bytes of workspace fp8gemm_decode_attention needs for `splits` position splits (0 when
// splits <= 1); the same for head_dim 64 and 128 (slots of 128 floats).
size_t fp8gemm_decode_attention_workspace_bytes(int64_t batch, int64_t hq, int64_t splits);

// Decode attention: for each sequence b and kv head g, its hq/hkv query heads attend over cache
// positions [0, len) (q already carries the 1/sqrt(d) scale): f32 scores, max-subtracted f32
// softmax, f32 P·V. Positions are split into `splits` ranges (clamped to [1, ceil(len/32)];
// with more than one, partial results go to `workspace` and a second kernel combines them).
// Each head's d outputs are then written as
//   - `qa`/`sa` (when qa != NULL; d = 128 only): quantized exactly like fp8gemm_quantize_act
//     (amax with NaN propagation, s = max(amax, 1e-4) / 448, q = e4m3(x / s)), head h of row b
//     in column block h: sa[h * m_pad + b]. Padding rows b in [batch, m_pad) of sa are set to
//     zero. qa != NULL at d = 64 is FP8GEMM_ERR_SHAPE.
//   - `out` (when out != NULL): bf16.
// At least one of qa / out must be given; sa is required with qa. Cache positions before
// len - 1 are read before the kernel waits for the previous one (PDL): only q and position
// len - 1 may come from the kernel just before (qk_norm_rope_append, as in a decode step).
// Requires head_dim 64 or 128, hq % hkv == 0, hq / hkv <= 16, 1 <= len <= cap, 16-byte aligned
// pointers.
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
// Outputs and `splits` as fp8gemm_decode_attention; the result is bit-identical to
// fp8gemm_qk_norm_rope_append (same flags) followed by fp8gemm_decode_attention with the same
// `splits`, whatever head_splits. qk_norm, cos_row, sin_row and cache positions before `offset`
// are read before the kernel waits for the previous one (PDL): only qkv may come from the
// kernel just before. Requires head_dim 64 or 128 (qa == NULL at 64), flags 0 or
// FP8GEMM_ATTN_NO_QK_NORM, hq % hkv == 0, hq / hkv <= 16, 0 <= offset < cap, 16-byte aligned
// pointers.
int32_t fp8gemm_decode_step_attention(const void* qkv, const void* qk_norm, const void* cos_row,
                                      const void* sin_row, void* k_cache, void* v_cache,
                                      int64_t batch, int64_t hq, int64_t hkv, int64_t head_dim,
                                      int64_t cap, int64_t offset, float eps, uint32_t flags,
                                      int64_t splits, int64_t head_splits, void* workspace,
                                      size_t workspace_bytes, uint32_t* counters, uint8_t* qa,
                                      float* sa, void* out, void* stream);

// ---- Prefill attention (kernels/attention/prefill.cu) ---------------------------------------
// Causal attention of t new tokens per sequence over the KV cache, flash style (no t x t buffer):
// token i of sequence b sits at position offset + i and attends positions [0, offset + i] of the
// caches (the new tokens' k and v already appended at [offset, offset + t)), f32 scores and
// online softmax, P rounded to bf16 for P·V, f32 accumulation. Layouts (bf16, d = head_dim 64
// or 128):
//   q        token i of sequence b, head h at q[(b * t + i) * q_row + h * d ...]: the roped q
//            heads, e.g. inside the q|k rows of a [b * t, (hq + hkv) * d] tensor
//            (q_row >= hq * d, a multiple of 8); any attention scale already folded in
//   k/v cache[batch, hkv, cap, d] as for the decode attention
//   out      [batch * t, hq * d] bf16 (optional when qa is given)
//   qa, sa   (d = 128 only) the o projection's quantized operand, exactly
//            fp8gemm_quantize_act of `out`: qa e4m3 [batch * t, hq * d], sa f32 [hq][m_pad],
//            m_pad = round_up(batch * t, 4), padding rows zeroed.
// Requires hq % hkv == 0, hq <= 65535, 0 <= offset, offset + t <= cap, batch <= 65535,
// t <= 65535 * 64, 16-byte aligned pointers (sa: 4). Waits for the previous kernel (PDL) before
// reading anything.
int32_t fp8gemm_prefill_attention(const void* q, int64_t q_row, const void* k_cache,
                                  const void* v_cache, int64_t batch, int64_t t, int64_t hq,
                                  int64_t hkv, int64_t head_dim, int64_t cap, int64_t offset,
                                  uint8_t* qa, float* sa, void* out, void* stream);

// The same attention by the warpgroup-MMA kernel (kernels/attention/prefill_wgmma.cu): head_dim
// 128 only, same arguments, layouts and outputs (the quantized operand as above, from its own
// bf16 output), batch * t and batch * hkv below 2^31; FP8GEMM_ERR_TMA when a tensor map cannot
// be built.
int32_t fp8gemm_prefill_attention_wgmma(const void* q, int64_t q_row, const void* k_cache,
                                        const void* v_cache, int64_t batch, int64_t t, int64_t hq,
                                        int64_t hkv, int64_t head_dim, int64_t cap, int64_t offset,
                                        uint8_t* qa, float* sa, void* out, void* stream);

// ---- Mixture-of-experts routing (kernels/moe/routing.cu) -------------------------------------

// Routing of m tokens over `experts` (<= 256) experts, one CTA: per token the softmax of its f32
// logits [m, experts] row, its top_k (<= 32) experts (larger probability first, the lower expert
// on ties) into ids [m, top_k] and their probabilities into weights [m, top_k] (divided by their
// sum, taken in that order, when norm != 0). Then the masked layout of the local experts
// [first, first + local): counts[local] tokens per expert (at most max_m) and pos [m, top_k] the
// slot e_local * max_m + rank of each entry (rank: among the expert's tokens in token order), or
// 0xffffffff for an expert outside the range or a rank past max_m. 4-byte aligned pointers.
int32_t fp8gemm_moe_route(const float* logits, int64_t m, int32_t experts, int32_t top_k, int32_t norm,
                          int32_t first, int32_t local, int64_t max_m, uint32_t* ids, float* weights,
                          uint32_t* pos, uint32_t* counts, void* stream);

// Each token row of x [m, k] (bf16 or f32, k % 8 == 0; f32: k % 4 == 0) quantized as
// fp8gemm_quantize_act does and stored at each of its slots (pos [m, top_k], as
// fp8gemm_moe_route writes; 0xffffffff: none) of the masked operand: q row `slot` of
// [local * max_m, k] and its scales at [slot / max_m][k / 128][round_up(max_m, 4)] entry
// slot % max_m. Rows and scales of no slot are left as they were. x 16-byte aligned, q 8-byte.
int32_t fp8gemm_moe_gather_quant(const void* x, int32_t x_dtype, int64_t m, int64_t k, int32_t top_k,
                                 const uint32_t* pos, int64_t max_m, uint8_t* q, float* sa, void* stream);

// out[t][c] (f32 or bf16, out_dtype) = sum over token t's slots (pos [m, top_k]; 0xffffffff
// skipped), in ascending slot order, of f32(y[slot][c]) * weights[t][j]: each product rounded,
// then added to 0 in that order (no fused multiply-add), the sum rounded once to out_dtype.
// y bf16 [slots, n].
int32_t fp8gemm_moe_combine(const void* y, int64_t m, int64_t n, int32_t top_k, const uint32_t* pos,
                            const float* weights, void* out, int32_t out_dtype, void* stream);

// ---- Sampling (kernels/sampling/) ----------------------------------------------------------------

// out[r] = argmax over c in [0, cols) of x[r * row_stride + c], for r in [0, rows), on f32 or
// bf16 logits (x_dtype: FP8GEMM_F32 or FP8GEMM_BF16; every bf16 value converts exactly to f32,
// so bf16 logits need no f32 copy): the semantics of candle 0.11's CPU argmax, which scans left
// to right and replaces its candidate only when `candidate < x[c]`:
//   - ties: the first (smallest) index of the maximum (-0.0 and +0.0 are equal);
//   - NaN:  a NaN at column 0 makes the answer 0; a NaN anywhere else is skipped;
//   - a row of -inf (or of NaN) gives 0.
// (candle's CUDA argmax differs on both: ties and NaNs resolve by thread layout.)
// Requires 1 <= rows < 2^31, 1 <= cols < 2^31, row_stride >= 0, x aligned to its element size
// and out 4-byte aligned (FP8GEMM_ERR_ALIGN otherwise; rows need not be 16-byte aligned);
// FP8GEMM_ERR_DTYPE for another dtype code.
int32_t fp8gemm_argmax_rows(const void* x, int32_t x_dtype, int64_t rows, int64_t cols,
                            int64_t row_stride, uint32_t* out, void* stream);

// ---- Timeline trace (kernels/trace/; builds with the cargo feature `trace` only) ----------------
#ifdef FP8GEMM_TRACE
// Waits for the device, then writes the kernel timeline trace rings (fp8gemm/common/trace.cuh)
// to `path`. Returns the number of records written, -2 on a CUDA error, -3 on a file error.
int64_t fp8gemm_trace_dump(const char* path);
#endif

#ifdef __cplusplus
}
#endif
