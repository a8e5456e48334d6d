// candle-fp8 kernels: the C ABI between the CUDA code in kernels/ and everything that calls
// it (the Rust crate through src/cuda/ffi.rs, and the Python dev harness through ctypes).
//
// Every entry point validates its arguments, launches asynchronously on `stream`
// (a cudaStream_t / CUstream, passed as void*), never synchronizes, and returns a status
// code (0 = success). fp8gemm_status_string() names a code.
//
// Layouts (the numeric contract, see design.md §1):
//   x       [m, k]        bf16 or f32, row-major
//   q       [m, k]        e4m3 (fn) bytes, row-major
//   sa      [kb][m_pad]   f32, MN-major: element (row, kblock) at sa[kblock * m_pad + row],
//                         kb = k / 128, m_pad = round_up(m, 4); base 16-byte aligned
//   w       [n, k]        e4m3 (fn) bytes, row-major
//   sw      [nb][kb]      f32, row-major, nb = ceil(n / 128)
//   y       [m, n]        bf16, row-major
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum fp8gemm_status {
  FP8GEMM_OK = 0,
  FP8GEMM_ERR_SHAPE = 1,      // a dimension is zero, negative, or breaks a divisibility rule
  FP8GEMM_ERR_ALIGN = 2,      // a pointer is not 16-byte aligned
  FP8GEMM_ERR_CONFIG = 3,     // the requested schedule/config is not compiled in
  FP8GEMM_ERR_DEVICE = 4,     // the current device is not sm_90 (Hopper)
  FP8GEMM_ERR_TMA = 5,        // cuTensorMapEncodeTiled failed (or could not be loaded)
  FP8GEMM_ERR_LAUNCH = 6,     // a CUDA runtime call or kernel launch failed
  FP8GEMM_ERR_WORKSPACE = 7,  // the workspace is missing or too small for this config
  FP8GEMM_ERR_DTYPE = 8,      // an unsupported dtype code
};

// Input dtypes for activation quantization.
enum fp8gemm_dtype { FP8GEMM_BF16 = 0, FP8GEMM_F32 = 1 };

// Schedule kinds. The Rust dispatcher (src/dispatch.rs) chooses one; the kernels check that
// the (kind, block sizes, stages) combination is one they instantiate.
enum fp8gemm_kind {
  FP8GEMM_KIND_AUTO = 0,         // let the C++ side pick a compiled default (dev harness)
  FP8GEMM_KIND_SMALL_M = 1,      // single-partition multistage, one CTA per output tile
  FP8GEMM_KIND_SWAP_AB = 2,      // transposed: W rows on the wgmma M side, tokens on N
  FP8GEMM_KIND_WARP_SPEC = 3,    // non-persistent warp-specialized
  FP8GEMM_KIND_PERSISTENT = 4,   // persistent warp-specialized, 2 M waves
  FP8GEMM_KIND_SWAP_AB_STREAMK = 5,  // swap-AB tiles, stream-K: the (tile, K block) units split
                                     // evenly over a resident grid, partial tiles summed in the
                                     // kernel; split_k = CTAs per SM (workspace: as PERSISTENT's)
  FP8GEMM_KIND_SMALL_M_STREAMK = 6,  // small-M tiles (64 tokens x block_n weight columns), stream-K
                                     // as SWAP_AB_STREAMK
};

typedef struct fp8gemm_config {
  int32_t kind;     // enum fp8gemm_kind
  int32_t block_m;  // tile rows of y (for SWAP_AB: tokens per tile)
  int32_t block_n;  // tile columns of y (for SWAP_AB: weight rows per tile)
  int32_t stages;   // shared-memory pipeline depth
  int32_t split_k;  // 1 = no split; > 1 needs a workspace (fp8gemm_workspace_bytes). PERSISTENT:
                    // the K ranges of each tile of a partial last round (split tail, summed in
                    // the kernel; clamped to one round of CTAs, none when the rounds are full).
                    // SWAP_AB_STREAMK / SMALL_M_STREAMK: CTAs per SM of the grid (clamped to what
                    // fits)
  int32_t num_sms;  // SMs a persistent grid may use (0 = all)
} fp8gemm_config;

// Human-readable name of a status code (static string).
const char* fp8gemm_status_string(int32_t status);

// Bytes of workspace fp8gemm_gemm needs for this config and shape (0 when none).
size_t fp8gemm_workspace_bytes(const fp8gemm_config* cfg, int64_t m, int64_t n, int64_t k);

// The configuration FP8GEMM_KIND_AUTO resolves to for an m x n x k GEMM on `sms` SMs (0: 132),
// the rule src/dispatch.rs `choose_config` mirrors (a test compares the two). Host-only.
int32_t fp8gemm_auto_config(int64_t m, int64_t n, int64_t k, int32_t sms, fp8gemm_config* out);

// The compiled configurations (split_k = 1 for those that cannot split, 0 for those that can;
// num_sms = 0): writes min(count, capacity) entries to `out` (may be NULL when capacity is 0)
// and returns the count. For tuning tools (examples/bench.rs --sweep).
int32_t fp8gemm_compiled_configs(fp8gemm_config* out, int32_t capacity);

// Per-token, per-128-column activation quantization, one pass:
//   s = max(amax, 1e-4) / 448, q = cvt.rn.satfinite.e4m3(x / s); scales written MN-major.
// Requires k % 128 == 0. Rows of sa between m and m_pad are set to zero.
int32_t fp8gemm_quantize_act(const void* x, int32_t x_dtype, uint8_t* q, float* sa,
                             int64_t m, int64_t k, void* stream);

// y = blocked-FP8 GEMM (two-level accumulation, both scales applied every 128-wide K block).
// Requires k % 128 == 0, n % 16 == 0, m >= 1. `workspace` may be NULL when
// fp8gemm_workspace_bytes() returns 0. PERSISTENT with a split tail (split_k > 1) and
// the stream-K kinds: the workspace starts with a 4 KiB page of flags that must be zero when the buffer is first used
// and that every launch leaves zero; give these launches a buffer of their own (allocated
// zeroed), never one that other configurations write their split-K partials into.
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

// The full linear at decode sizes in one launch: y = fp8gemm_gemm(fp8gemm_quantize_act(x)),
// with the quantization inside the GEMM (x bf16 [m, k], 16-byte aligned), bit-identical to the
// two launches. Only the configurations compiled for it: the swap-AB 8-token tile (kind
// SWAP_AB, block_m 8, block_n 64; any K split, the workspace as fp8gemm_workspace_bytes gives for
// that config) — what FP8GEMM_KIND_AUTO picks at m <= 8; FP8GEMM_ERR_CONFIG otherwise. `stages`
// is not matched: the kernel's ring is 7 stages (each also holds the bf16 activation tile).
int32_t fp8gemm_gemm_quant_in(const void* x, const uint8_t* w, const float* sw, void* y,
                              int64_t m, int64_t n, int64_t k, const fp8gemm_config* cfg,
                              void* workspace, size_t workspace_bytes, void* stream);

// The MLP's gate/up GEMM with SiLU * up and the down projection's activation quantization
// in its epilogue (decode sizes; one launch instead of a GEMM and fp8gemm_swiglu_quant):
//   gu      = blocked-FP8 GEMM of (qa, sa) with w = [gate; up] ([2 * inter, k], sw as usual)
//   h       = bf16(bf16(silu(bf16 gu[:, :inter])) * bf16 gu[:, inter:])   (candle's roundings)
//   q, sa_q = quantize(h): q [m, inter] e4m3, sa_q [inter/128][m_pad] f32 (padding rows zeroed)
// Bit-identical to fp8gemm_gemm without K split followed by fp8gemm_swiglu_quant. Requires
// 1 <= m <= 16, inter % 128 == 0, k % 128 == 0. `tile_rows` (weight rows per CTA: 64, 128 or
// 256) and `stages` (ring depth) pick a compiled variant: (64, 8), (64, 6), (128, 4), (256, 3)
// (256 rows: a whole quantization group per CTA, no cluster); 0 = the default — (256, 3) at 9-16
// tokens, (128, 4) at 1-8 — or that tile's first depth (FP8GEMM_ERR_CONFIG when the pair is not
// compiled). In the Qwen3-32B decode step: faster than fp8gemm_gemm + fp8gemm_swiglu_quant at 16
// tokens (256 rows), slower at 1-8 (docs/PERF.md, sessions 6 and 14).
int32_t fp8gemm_gemm_swiglu_quant(const uint8_t* qa, const float* sa, const uint8_t* w,
                                  const float* sw, int64_t m, int64_t inter, int64_t k,
                                  int32_t tile_rows, int32_t stages, uint8_t* q, float* sa_q,
                                  void* stream);

// y[m, n] (bf16) = bf16(sum over s of partials[s][m][n]), added in split order: the reduction
// fp8gemm_gemm runs after a workspace split. n % 16 == 0, 16-byte aligned pointers.
int32_t fp8gemm_reduce_partials(const float* partials, void* y, int64_t m, int64_t n,
                                int32_t splits, void* stream);

// Dequantize a blocked-FP8 weight to bf16: out[n][k] = w[n][k] * sw[n/128][k/128]
// (any n, k; partial blocks allowed). Used by the dequant provider.
int32_t fp8gemm_dequant_weight(const uint8_t* w, const float* sw, void* out, int64_t n,
                               int64_t k, void* stream);

// n random e4m3 codes into `out` (device): cvt.rn.satfinite.e4m3(u * 448) with u uniform in
// [-1, 1), a pure function of (seed, element index). For random-weight models built on the
// device without f32 transients.
int32_t fp8gemm_random_e4m3(uint8_t* out, int64_t n, uint64_t seed, void* stream);

// Development: waits for the device, then writes the kernel timeline trace rings of a build
// compiled with -DFP8GEMM_TRACE (kernels/trace.cu, fp8gemm/trace.cuh) to `path`. Returns the
// number of records written, -1 when the build has no trace, -2 on a CUDA error, -3 on a file
// error.
int64_t fp8gemm_trace_dump(const char* path);

#ifdef __cplusplus
}
#endif
