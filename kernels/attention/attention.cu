// Decode-step attention (one new token per sequence, head_dim kD = 128 or 64):
//   qk_norm_rope_append_kernel   per-head RMSNorm (kNorm; else none) + weight + RoPE of q and k,
//                                KV-cache append (a decode step's token, or a prompt's tokens)
//   decode_attention_kernel      f32 online-softmax attention over a range of cache positions;
//                                <kRep, true, ..>: the whole step in one launch (the qk-norm,
//                                RoPE and append of its own heads first; position splits merged
//                                in a cluster or by the last split to finish)
//   decode_combine_kernel        merges the position splits (two-launch path, or > 8 splits)
// At head_dim 128 the attention kernels end by quantizing each head's 128 outputs into the
// o-projection's activation operand (the group of the activation contract is exactly one head).
// At head_dim 64 a group spans two heads, which need not be in one CTA (GQA 3: a kv head's three
// query heads): the kernels write bf16 only, and the caller quantizes it (fp8gemm_quantize_act).
// Every kernel of the head_dim 128, RMSNorm configuration is the code it was before head_dim 64
// and the norm-free mode were added (template parameters, no runtime branch).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "api.h"
#include "fp8gemm/common/launch_pdl.cuh"
#include "fp8gemm/common/act_quant.cuh"
#include "fp8gemm/ptx/tma.cuh"
#include "fp8gemm/common/trace.cuh"

namespace fp8gemm::attn {

constexpr int kMaxHeadDim = 128;
constexpr int kThreads = 128;    // one thread per head dimension (t < kD) / per position of a tile
constexpr int kTile = 32;        // cache positions per tile (= the split granularity)
constexpr int kMaxRep = 16;      // query heads per kv head
constexpr int kMaxClusterSplits = 8;  // fused: position splits merged inside a cluster
// Floats per (head, split) slot of the workspace's partial outputs, whatever the head dim (so
// that fp8gemm_decode_attention_workspace_bytes needs no head_dim).
constexpr int kWsStride = kMaxHeadDim;
static_assert(kThreads == kMaxHeadDim, "thread t owns output dim t");
static_assert(kTile == 32 && kThreads == 4 * kTile, "4 threads per position; one lane per position");

// The work split of one head dimension kD over the kThreads threads (head_dim 128: 4 values per
// lane in the qk norm, 4 16-byte chunks per thread in the scores, 16 threads x 8 dims per
// position group of 4 in P·V; head_dim 64: 2, 2, 8 threads x 8 dims per group of 2).
template <int kD>
struct HeadDim {
  static_assert(kD == 64 || kD == 128, "head_dim 64 or 128");
  static constexpr int kLaneVals = kD / 32;             // qk norm: lane j holds dims j + 32 i
  static constexpr int kChunks = kD / 8;                // 16-byte chunks of a bf16 row
  static constexpr int kScoreChunks = kChunks / 4;      // scores: per thread (4 per position)
  static constexpr int kDimThreads = kChunks;           // P·V: threads per position group
  static constexpr int kPosGroups = kThreads / kDimThreads;
  static constexpr int kPosPerGroup = kTile / kPosGroups;
  // Threads that own an output dim (t < kD): all of them at 128 (a compile-time true).
  static __device__ __forceinline__ bool owns_dim(int t) { return kD == kThreads || t < kD; }
};

// ---------------------------------------------------------------------------------------------
// qk norm + RoPE + append: one warp per (sequence, head) over the q, k and v heads.
// ---------------------------------------------------------------------------------------------

// Lane j holds dims j, j+32, .. (kD / 32 of them: j, j+32, j+64, j+96 at head_dim 128): its sum
// of squares accumulates in that order and the warp reduces with a xor butterfly — the
// association of candle's rmsnorm with a 32-thread block (n_cols < 1024), so the f32 sum, and
// everything after it, is bit-identical. RoPE pairs (dim j + 32 p, dim j + 32 p + kD / 2) stay
// inside the lane. norm_rope_lane: one head's RMSNorm (kNorm; without it none: Llama, Qwen2),
// per-head weight and RoPE of the lane's values (xin -> r); all 32 lanes must call it.
template <int kD, bool kNorm>
__device__ __forceinline__ void norm_rope_lane(const __nv_bfloat16 (&xin)[kD / 32],
                                               const __nv_bfloat16 (&wn)[kD / 32],
                                               const __nv_bfloat16 (&cs)[kD / 64],
                                               const __nv_bfloat16 (&sn)[kD / 64], float eps,
                                               __nv_bfloat16 (&r)[kD / 32]) {
  constexpr int kV = kD / 32, kHalf = kV / 2;
  __nv_bfloat16 y[kV];
  if constexpr (kNorm) {
    // RMSNorm (candle: tmp += x*x as fma, /ncols with IEEE division, rsqrt.approx, bf16(scale*x)).
    float v[kV];
    float tmp = 0.f;
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      v[i] = __bfloat162float(xin[i]);
      tmp = __fmaf_rn(v[i], v[i], tmp);
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) tmp = __fadd_rn(tmp, __shfl_xor_sync(0xffffffffu, tmp, o));
    const float scale = rsqrtf(__fadd_rn(__fdiv_rn(tmp, float(kD)), eps));

    // Per-head weight (candle's broadcast_mul: one bf16 rounding of the exact product).
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      const __nv_bfloat16 n = __float2bfloat16_rn(__fmul_rn(scale, v[i]));
      y[i] = __float2bfloat16_rn(__fmul_rn(__bfloat162float(n), __bfloat162float(wn[i])));
    }
  } else {
    (void)eps;
    // The per-head weight alone (the same broadcast_mul rounding, on the projection's output).
#pragma unroll
    for (int i = 0; i < kV; ++i)
      y[i] = __float2bfloat16_rn(__fmul_rn(__bfloat162float(xin[i]), __bfloat162float(wn[i])));
  }

  // RoPE, rotate-half, in bf16 arithmetic. candle's rope_thd writes `x1*c - x2*s` and
  // `x1*s + x2*c` with bf16 operators (PTX mul/sub/add.bf16, contractible); ptxas 13.0 for
  // sm_90a turns each into HMUL2 + HFMA2 with the x2 product rounded first. We pin exactly
  // that: r1 = fma(x1, c, -rn(x2*s)), r2 = fma(x1, s, rn(x2*c)).
#pragma unroll
  for (int p = 0; p < kHalf; ++p) {
    const __nv_bfloat16 c = cs[p], s = sn[p];
    const __nv_bfloat16 x1 = y[p], x2 = y[p + kHalf];
    r[p] = __hfma(x1, c, __hneg(__hmul_rn(x2, s)));
    r[p + kHalf] = __hfma(x1, s, __hmul_rn(x2, c));
  }
}

template <int kD, bool kNorm>
__global__ void __launch_bounds__(kThreads) qk_norm_rope_append_kernel(
    const __nv_bfloat16* __restrict__ qkv, const __nv_bfloat16* __restrict__ norm_w,
    const __nv_bfloat16* __restrict__ cos_row, const __nv_bfloat16* __restrict__ sin_row,
    __nv_bfloat16* __restrict__ q_out, __nv_bfloat16* __restrict__ k_cache,
    __nv_bfloat16* __restrict__ v_cache, int64_t batch, int64_t tokens, int hq, int hkv,
    int64_t cap, int64_t offset, float eps) {
  ptx::griddep_launch_dependents();
  const int heads = hq + 2 * hkv;
  const int64_t warp = (int64_t(blockIdx.x) * kThreads + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  // Warp = (row, head); row = b * tokens + i is token i of sequence b, at position offset + i.
  const int64_t row = warp / heads;
  const int64_t b = row / tokens, pos = offset + row % tokens;
  const int h = static_cast<int>(warp % heads);
  // The head's norm weights and the RoPE rows are model constants (see api.h): read them
  // before waiting for the previous kernel, so that only qkv's load is on the critical path.
  constexpr int kV = kD / 32;
  __nv_bfloat16 wn[kV], cs[kV / 2], sn[kV / 2];
  const bool qk_head = warp < batch * tokens * heads && h < hq + hkv;
  if (qk_head) {
    const int64_t t_row = (row % tokens) * (kD / 2);
#pragma unroll
    for (int i = 0; i < kV; ++i) wn[i] = norm_w[int64_t(h) * kD + lane + 32 * i];
#pragma unroll
    for (int i = 0; i < kV / 2; ++i) {
      cs[i] = cos_row[t_row + lane + 32 * i];
      sn[i] = sin_row[t_row + lane + 32 * i];
    }
  }
  ptx::griddep_wait();  // qkv is the previous GEMM's output; the caches were written before too
  if (warp >= batch * tokens * heads) return;
  const __nv_bfloat16* x = qkv + warp * kD;
  __nv_bfloat16 xin[kV];
#pragma unroll
  for (int i = 0; i < kV; ++i) xin[i] = x[lane + 32 * i];

  if (h >= hq + hkv) {  // a v head: copied as is
    const int64_t g = h - hq - hkv;
    __nv_bfloat16* dst = v_cache + ((b * hkv + g) * cap + pos) * kD;
#pragma unroll
    for (int i = 0; i < kV; ++i) dst[lane + 32 * i] = xin[i];
    return;
  }

  __nv_bfloat16 r[kV];
  norm_rope_lane<kD, kNorm>(xin, wn, cs, sn, eps, r);

  __nv_bfloat16* dst = h < hq ? q_out + (row * hq + h) * kD
                              : k_cache + ((b * hkv + (h - hq)) * cap + pos) * kD;
#pragma unroll
  for (int i = 0; i < kV; ++i) dst[lane + 32 * i] = r[i];
}

// ---------------------------------------------------------------------------------------------
// Attention
// ---------------------------------------------------------------------------------------------

struct DecodeParams {
  const __nv_bfloat16* q;  // [batch, hq, d] (separate path; unused when fused)
  const __nv_bfloat16* k;
  const __nv_bfloat16* v;
  float* ws_o;   // [batch, hq, splits, kWsStride] unnormalized partial outputs (first d used)
  float* ws_ml;  // [batch, hq, splits, 2] running max and sum of each split
  uint8_t* qa;
  float* sa;
  __nv_bfloat16* out;
  // The fused step: q, k and v of the new token come from the q|k|v GEMM output `qkv`; the CTA
  // normalizes and ropes them itself and appends k, v at position len - 1 of the caches.
  const __nv_bfloat16* qkv;     // [batch, (hq + 2 hkv) * d]
  const __nv_bfloat16* norm_w;  // [hq + hkv, d]
  const __nv_bfloat16* cos_row;
  const __nv_bfloat16* sin_row;
  __nv_bfloat16* k_out;  // = k, v (the caches), writable
  __nv_bfloat16* v_out;
  float eps;
  int64_t batch, cap, len, chunk, m_pad;
  int hq, hkv, n_rep, splits;
  int head_splits, rep;  // the kv head's n_rep query heads in head_splits CTAs of rep heads
  int cluster_merge;     // the position splits form a cluster and rank 0 merges them (fused)
  // Fused, tail merge: the splits write the workspace and the last one of each (kv head x head
  // split, sequence) to finish - counted in counters[blockIdx.z * gridDim.y + blockIdx.y],
  // which it resets to 0 - merges them (no cluster launch, no second kernel).
  unsigned* counters;
};

// Max over the block's 128 threads with NaN propagation (red: 4 floats of shared memory).
__device__ __forceinline__ float block_amax(float a, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) a = max_nan(a, __shfl_xor_sync(0xffffffffu, a, o));
  __syncthreads();  // red may still be read from the previous call
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = a;
  __syncthreads();
  return max_nan(max_nan(red[0], red[1]), max_nan(red[2], red[3]));
}

// Writes dim threadIdx.x of head h of sequence b: quantized (head_dim 128 only: the activation
// contract, the group = this head's 128 values) and/or bf16. Every thread of the block must call
// it; at head_dim 64 threads t >= 64 write nothing (and p.qa is null: the host checks).
template <int kD>
__device__ __forceinline__ void write_head(const DecodeParams& p, int64_t b, int h, float x,
                                           float* red) {
  const int t = threadIdx.x;
  if constexpr (kD != kThreads) {
    if (t < kD && p.out != nullptr)
      p.out[b * (int64_t(p.hq) * kD) + int64_t(h) * kD + t] = __float2bfloat16_rn(x);
    (void)red;
    return;
  }
  const int64_t col = b * (int64_t(p.hq) * kD) + int64_t(h) * kD + t;
  if (p.out != nullptr) p.out[col] = __float2bfloat16_rn(x);
  if (p.qa != nullptr) {
    const float amax = block_amax(fabsf(x), red);
    const float s = act_scale(amax);
    p.qa[col] = static_cast<uint8_t>(ptx::cvt_e4m3x2(ptx::div_rn(x, s), 0.f) & 0xff);
    if (t == 0) p.sa[int64_t(h) * p.m_pad + b] = s;
    // The last sequence also zeroes the (at most 3) padding rows of its column: no memset.
    if (b == p.batch - 1 && t < p.m_pad - p.batch) p.sa[int64_t(h) * p.m_pad + p.batch + t] = 0.f;
  }
}

// The fused step's prologue: the CTA's rep query heads, and (when the CTA covers position
// len - 1) the new k and v, from qkv — exactly qk_norm_rope_append_kernel's arithmetic. Warp w
// takes jobs w, w + 4, ...: job j < rep is query head j (into q_s as f32), job rep the k head,
// job rep + 1 the v head (both into k_new / v_new, and into the caches when `append`).
template <int kRep, int kD, bool kNorm>
struct FusedPrologue {
  static constexpr int kJobs = (kRep + 2 + 3) / 4;  // per warp
  static constexpr int kV = kD / 32;                // values per lane of a head
  __nv_bfloat16 wn[kJobs][kV], cs[kV / 2], sn[kV / 2];

  // Model constants only (read before griddepcontrol.wait).
  __device__ __forceinline__ void load_constants(const DecodeParams& p, int g, int q0, int rep,
                                                 int warp, int lane) {
#pragma unroll
    for (int j = 0; j < kJobs; ++j) {
      const int job = warp + 4 * j;
      const int row = job < rep ? q0 + job : p.hq + g;  // q rows, then k rows of qk_norm
      if (job <= rep)
#pragma unroll
        for (int i = 0; i < kV; ++i) wn[j][i] = p.norm_w[int64_t(row) * kD + lane + 32 * i];
    }
#pragma unroll
    for (int i = 0; i < kV / 2; ++i) {
      cs[i] = p.cos_row[lane + 32 * i];
      sn[i] = p.sin_row[lane + 32 * i];
    }
  }

  __device__ __forceinline__ void run(const DecodeParams& p, int64_t b, int g, int q0, int rep,
                                      bool has_new, bool append, int warp, int lane,
                                      float (*q_s)[kD], __nv_bfloat16* k_new,
                                      __nv_bfloat16* v_new) {
    const __nv_bfloat16* row = p.qkv + b * int64_t(p.hq + 2 * p.hkv) * kD;
    const int64_t slot = ((b * p.hkv + g) * p.cap + (p.len - 1)) * kD;
#pragma unroll
    for (int j = 0; j < kJobs; ++j) {
      const int job = warp + 4 * j;  // warp-uniform
      if (job >= rep + 2 || (job >= rep && !has_new)) continue;
      const int head = job < rep ? q0 + job : job == rep ? p.hq + g : p.hq + p.hkv + g;
      __nv_bfloat16 xin[kV];
#pragma unroll
      for (int i = 0; i < kV; ++i) xin[i] = row[int64_t(head) * kD + lane + 32 * i];
      if (job == rep + 1) {  // v: as is
#pragma unroll
        for (int i = 0; i < kV; ++i) {
          v_new[lane + 32 * i] = xin[i];
          if (append) p.v_out[slot + lane + 32 * i] = xin[i];
        }
        continue;
      }
      __nv_bfloat16 r[kV];
      norm_rope_lane<kD, kNorm>(xin, wn[j], cs, sn, p.eps, r);
#pragma unroll
      for (int i = 0; i < kV; ++i) {
        if (job < rep) {
          q_s[job][lane + 32 * i] = __bfloat162float(r[i]);
        } else {
          k_new[lane + 32 * i] = r[i];
          if (append) p.k_out[slot + lane + 32 * i] = r[i];
        }
      }
    }
  }
};

// One head's output dim (thread t) merged over its position splits from their partial states,
// in split order: m = max m_s, l = sum l_s e^(m_s - m), o = sum o_s e^(m_s - m), returns o / l.
// The one definition of the merge (combine kernel, cluster merge, tail merge): same operations
// in the same order, so every path gives the same bits. `m_of(s)`, `l_of(s)`, `o_of(s)` read
// split s's running max, sum and unnormalized output.
template <class M, class L, class O>
__device__ __forceinline__ float merge_splits(int splits, M m_of, L l_of, O o_of) {
  float m = -INFINITY;
  for (int s = 0; s < splits; ++s) m = fmaxf(m, m_of(s));
  float l = 0.f, o = 0.f;
  for (int s = 0; s < splits; ++s) {
    const float w = expf(m_of(s) - m);
    l = fmaf(l_of(s), w, l);
    o = fmaf(o_of(s), w, o);
  }
  return o / l;
}

// One CTA per (split, kv head x head split, sequence), over its positions in tiles of 32. The
// kernel is latency-bound (a decode step reads ~50 KB per CTA), so each tile issues all its K
// and V loads at once (16-byte vectors, both in flight together) and every thread has work in
// every phase:
//   scores   4 threads per position, each a quarter of the dims, reduced by 2 shuffles;
//   softmax  one warp per query head, lane = position (online max/sum across tiles);
//   P·V      kD / 8 threads per position group (of 4 positions at head_dim 128, 2 at 64), 8
//            dims each, accumulated in registers across tiles; the position groups are summed
//            once at the end through shared memory.
// kFused: q, the new k and v come from qkv (FusedPrologue; kNorm: q and k RMS-normalized, else
// only weighted) instead of q and the caches (kNorm is unused then). Every query head's
// arithmetic is independent of which CTA (head split) computes it, so the result depends on the
// position splits only.
template <int kRep, bool kFused, int kD, bool kNorm>
__global__ void __launch_bounds__(kThreads, 1) decode_attention_kernel(const DecodeParams p) {
  using H = HeadDim<kD>;
  __shared__ __align__(16) float q_s[kRep][kD];
  __shared__ float p_s[kRep][kTile];  // scores, then probabilities
  __shared__ float m_s[kRep], l_s[kRep], a_s[kRep];
  __shared__ __align__(16) float sum_s[H::kPosGroups][kD];
  __shared__ __align__(16) __nv_bfloat16 kv_new[2][kFused ? kD : 8];  // fused: new k, v
  // Fused with cluster_merge: this split's unnormalized outputs and softmax states, read by
  // cluster rank 0 through distributed shared memory.
  __shared__ __align__(16) float part_o[kFused ? kRep : 1][kD];
  __shared__ float part_ml[kFused ? kRep : 1][2];
  __shared__ float red[4];
  __shared__ int last_s;  // tail merge: this CTA is the last split of its group to finish
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  const int split = blockIdx.x;
  const int g = blockIdx.y / p.head_splits, hs = blockIdx.y % p.head_splits;
  const int64_t b = blockIdx.z;
  const int rep = p.rep;
  const int q0 = g * p.n_rep + hs * rep;  // first query head of this CTA (within the sequence)
  const int64_t p0 = split * p.chunk;
  const int64_t p1 = min(p.len, p0 + p.chunk);
  // Trace marks: 1 past the PDL wait, 2 after the position tiles.
  FP8GEMM_TRACE_BEGIN(FP8GEMM_TRACE_ATTENTION);

  ptx::griddep_launch_dependents();

  const int64_t head0 = b * p.hq + q0;
  // Scores: position sp of the tile, 16-byte chunks c = 4i + quarter (interleaved so that the
  // four quarters read q_s in different banks).
  const int sp = t / 4, quarter = t % 4;
  // P·V: positions kPosPerGroup pg .. + kPosPerGroup - 1 of the tile, dims 8dg..8dg+7.
  constexpr int kPPG = H::kPosPerGroup;
  const int pg = t / H::kDimThreads, dg = t % H::kDimThreads;
  const __nv_bfloat16* kbase = p.k + (b * p.hkv + g) * p.cap * kD;
  const __nv_bfloat16* vbase = p.v + (b * p.hkv + g) * p.cap * kD;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  // The newest position (len - 1) is written in this step (fused: by this kernel, which keeps
  // its own copy in kv_new); all older ones by earlier decode steps, long complete.
  const int64_t fresh = p.len - 1;
  auto k_vec = [&](int64_t pos, int c) {
    if (kFused && pos == fresh) return reinterpret_cast<const uint4*>(kv_new[0])[c];
    return reinterpret_cast<const uint4*>(kbase + pos * kD)[c];
  };
  auto v_vec = [&](int64_t pos, int c) {
    if (kFused && pos == fresh) return reinterpret_cast<const uint4*>(kv_new[1])[c];
    return reinterpret_cast<const uint4*>(vbase + pos * kD)[c];
  };
  // Positions [tile0, end) of a tile; the others read as zeros.
  auto load_k = [&](int64_t tile0, int64_t end, uint4 (&kr)[H::kScoreChunks]) {
    const int64_t n = end - tile0;
#pragma unroll
    for (int i = 0; i < H::kScoreChunks; ++i) kr[i] = sp < n ? k_vec(tile0 + sp, 4 * i + quarter) : zero;
  };
  auto load_v = [&](int64_t tile0, int64_t end, uint4 (&vr)[kPPG]) {
    const int64_t n = end - tile0;
#pragma unroll
    for (int i = 0; i < kPPG; ++i) {
      const int j = kPPG * pg + i;
      vr[i] = j < n ? v_vec(tile0 + j, dg) : zero;
    }
  };
  // The first tile's K and V loads of the older positions go out before we wait for the
  // previous kernel (their HBM latency overlaps it); only the newest position, q and later
  // tiles are read after the wait. Later tiles' loads are issued as soon as the previous
  // tile's registers are consumed.
  uint4 kraw[H::kScoreChunks], vraw[kPPG];
  if (p0 < p1) {
    load_k(p0, min(p1, fresh), kraw);
    load_v(p0, min(p1, fresh), vraw);
  }
  const bool has_new = p0 <= fresh && fresh < p1;
  [[maybe_unused]] FusedPrologue<kRep, kD, kNorm> pro;
  if constexpr (kFused) pro.load_constants(p, g, q0, rep, warp, lane);
  ptx::griddep_wait();  // q (or qkv) and the newest cache position come from the previous kernel
  if (t == 0) FP8GEMM_TRACE_MARK(1);
  if constexpr (kFused) {
    // One CTA of the kv head (head split 0) appends; the others use their own copy.
    pro.run(p, b, g, q0, rep, has_new, has_new && hs == 0, warp, lane, q_s, kv_new[0], kv_new[1]);
  } else {
#pragma unroll
    for (int r = 0; r < kRep; ++r)
      if (r < rep && H::owns_dim(t)) q_s[r][t] = __bfloat162float(p.q[(head0 + r) * kD + t]);
  }
  if (t < rep) {
    m_s[t] = -INFINITY;
    l_s[t] = 0.f;
  }
  if constexpr (kFused) __syncthreads();  // kv_new is read below
  if (p0 <= fresh && fresh < min(p1, p0 + kTile)) {
    const int j = static_cast<int>(fresh - p0);
    if (sp == j) {
#pragma unroll
      for (int i = 0; i < H::kScoreChunks; ++i) kraw[i] = k_vec(fresh, 4 * i + quarter);
    }
#pragma unroll
    for (int i = 0; i < kPPG; ++i)
      if (kPPG * pg + i == j) vraw[i] = v_vec(fresh, dg);
  }
  float acc[kRep][8];
#pragma unroll
  for (int r = 0; r < kRep; ++r)
#pragma unroll
    for (int d = 0; d < 8; ++d) acc[r][d] = 0.f;
  __syncthreads();

  for (int64_t tile0 = p0; tile0 < p1; tile0 += kTile) {
    const int n = static_cast<int>(min(int64_t(kTile), p1 - tile0));
    const bool more = tile0 + kTile < p1;
    // 1. (This tile's K and V are already in flight.) Partial scores over this thread's kD / 4
    // dims, summed over the position's 4 threads.
    float s[kRep];
#pragma unroll
    for (int r = 0; r < kRep; ++r) s[r] = 0.f;
#pragma unroll
    for (int i = 0; i < H::kScoreChunks; ++i) {
      float kf[8];
      unpack_bf16x8(kraw[i], kf);
      const int c = 4 * i + quarter;
#pragma unroll
      for (int r = 0; r < kRep; ++r) {
        if (r < rep) {
          const float4 qa = *reinterpret_cast<const float4*>(&q_s[r][c * 8]);
          const float4 qb = *reinterpret_cast<const float4*>(&q_s[r][c * 8 + 4]);
          float a = s[r];
          a = fmaf(qa.x, kf[0], a);
          a = fmaf(qa.y, kf[1], a);
          a = fmaf(qa.z, kf[2], a);
          a = fmaf(qa.w, kf[3], a);
          a = fmaf(qb.x, kf[4], a);
          a = fmaf(qb.y, kf[5], a);
          a = fmaf(qb.z, kf[6], a);
          a = fmaf(qb.w, kf[7], a);
          s[r] = a;
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRep; ++r) {
      if (r < rep) {
        s[r] += __shfl_xor_sync(0xffffffffu, s[r], 1);
        s[r] += __shfl_xor_sync(0xffffffffu, s[r], 2);
        if (quarter == 0 && sp < n) p_s[r][sp] = s[r];
      }
    }
    if (more) load_k(tile0 + kTile, p1, kraw);
    __syncthreads();
    // 2. Online softmax, one warp per query head, lane = position.
    for (int r = warp; r < rep; r += kThreads / 32) {
      const float x = lane < n ? p_s[r][lane] : -INFINITY;
      float mx = x;
#pragma unroll
      for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_old = m_s[r];
      const float m_new = fmaxf(m_old, mx);
      const float e = lane < n ? expf(x - m_new) : 0.f;
      p_s[r][lane] = e;
      float sum = e;
#pragma unroll
      for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      __syncwarp();  // every lane has read m_s[r] before lane 0 overwrites it
      if (lane == 0) {
        const float alpha = expf(m_old - m_new);  // 0 on the first tile (m_old = -inf)
        a_s[r] = alpha;
        l_s[r] = l_s[r] * alpha + sum;
        m_s[r] = m_new;
      }
    }
    __syncthreads();
    // 3. acc[r][d] = alpha_r * acc[r][d] + Σ_j p[r][j] · v[j][8dg + d] over this thread's positions.
#pragma unroll
    for (int r = 0; r < kRep; ++r) {
      if (r < rep) {
        const float alpha = a_s[r];
#pragma unroll
        for (int d = 0; d < 8; ++d) acc[r][d] *= alpha;
      }
    }
#pragma unroll
    for (int i = 0; i < kPPG; ++i) {
      const int j = kPPG * pg + i;
      if (j < n) {
        float vf[8];
        unpack_bf16x8(vraw[i], vf);
#pragma unroll
        for (int r = 0; r < kRep; ++r) {
          if (r < rep) {
            const float pr = p_s[r][j];
#pragma unroll
            for (int d = 0; d < 8; ++d) acc[r][d] = fmaf(pr, vf[d], acc[r][d]);
          }
        }
      }
    }
    if (more) load_v(tile0 + kTile, p1, vraw);
    __syncthreads();  // p_s is overwritten by the next tile
  }
  if (t == 0) FP8GEMM_TRACE_MARK(2);

  // 4. Per head: sum the position groups (thread t < kD ends with output dim t), then write.
#pragma unroll
  for (int r = 0; r < kRep; ++r) {
    if (r < rep) {
      float4* dst = reinterpret_cast<float4*>(&sum_s[pg][8 * dg]);
      dst[0] = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
      dst[1] = make_float4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]);
      __syncthreads();
      float o = 0.f;
      if (H::owns_dim(t)) {
#pragma unroll
        for (int q = 0; q < H::kPosGroups; ++q) o += sum_s[q][t];
      }
      __syncthreads();  // sum_s is rewritten for the next head
      if (p.splits == 1) {
        write_head<kD>(p, b, q0 + r, o / l_s[r], red);
      } else if (kFused && p.cluster_merge) {
        if constexpr (kFused) {
          if (H::owns_dim(t)) part_o[r][t] = o;
          if (t == 0) {
            part_ml[r][0] = m_s[r];
            part_ml[r][1] = l_s[r];
          }
        }
      } else {
        const int64_t slot = (head0 + r) * p.splits + split;
        if (H::owns_dim(t)) p.ws_o[slot * kWsStride + t] = o;
        if (t == 0) {
          p.ws_ml[slot * 2] = m_s[r];
          p.ws_ml[slot * 2 + 1] = l_s[r];
        }
      }
    }
  }
  if constexpr (kFused) {
    if (p.splits > 1 && p.cluster_merge) {
      // decode_combine_kernel's merge, same operations in the same order, over the cluster's
      // splits (rank = split): the result is bit-identical to the two-launch path.
      ptx::cluster_sync();  // every split's partials are published
      if (ptx::cluster_ctarank() == 0) {
        for (int r = 0; r < rep; ++r) {
          auto peer = [&](const float* x, int s) {
            return ptx::ld_shared_cluster_f32(ptx::map_shared_to_rank(x, s));
          };
          float o = 0.f;
          if (H::owns_dim(t))
            o = merge_splits(
                p.splits, [&](int s) { return peer(&part_ml[r][0], s); },
                [&](int s) { return peer(&part_ml[r][1], s); }, [&](int s) { return peer(&part_o[r][t], s); });
          write_head<kD>(p, b, q0 + r, o, red);
        }
      }
      ptx::cluster_sync();  // the peers' shared memory stays alive until rank 0 has read it
    } else if (p.splits > 1 && p.counters != nullptr) {
      // Tail merge: publish this split's partials, count it; the last split merges them with
      // decode_combine_kernel's operations in the same order (bit-identical results).
      __threadfence();
      __syncthreads();
      unsigned* count = p.counters + blockIdx.z * gridDim.y + blockIdx.y;
      if (t == 0) last_s = atomicAdd(count, 1u) == static_cast<unsigned>(p.splits) - 1;
      __syncthreads();
      if (last_s) {
        __threadfence();  // the other splits' partials, published before their count
        for (int r = 0; r < rep; ++r) {
          const int64_t base = (head0 + r) * p.splits;
          float o = 0.f;
          if (H::owns_dim(t))
            o = merge_splits(
                p.splits, [&](int s) { return __ldcg(p.ws_ml + (base + s) * 2); },
                [&](int s) { return __ldcg(p.ws_ml + (base + s) * 2 + 1); },
                [&](int s) { return __ldcg(p.ws_o + (base + s) * kWsStride + t); });
          write_head<kD>(p, b, q0 + r, o, red);
        }
        if (t == 0) *count = 0;  // ready for the next launch (stream-ordered after this one)
      }
    }
  }
  FP8GEMM_TRACE_END();
}

// One CTA per (query head, sequence): merges the splits' partial softmax states.
template <int kD>
__global__ void __launch_bounds__(kThreads) decode_combine_kernel(const DecodeParams p) {
  __shared__ float red[4];
  const int h = blockIdx.x;
  const int64_t b = blockIdx.y;
  const int t = threadIdx.x;
  ptx::griddep_launch_dependents();
  ptx::griddep_wait();  // the partials come from decode_attention_kernel
  const int64_t base = (b * p.hq + h) * p.splits;
  float o = 0.f;
  if (HeadDim<kD>::owns_dim(t))
    o = merge_splits(
        p.splits, [&](int s) { return p.ws_ml[(base + s) * 2]; },
        [&](int s) { return p.ws_ml[(base + s) * 2 + 1]; },
        [&](int s) { return p.ws_o[(base + s) * kWsStride + t]; });
  write_head<kD>(p, b, h, o, red);
}


inline bool misaligned(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) != 0; }

// Effective split count and positions per split (a multiple of kTile; no split is empty).
inline void split_plan(int64_t len, int64_t requested, int64_t* splits, int64_t* chunk) {
  const int64_t tiles = (len + kTile - 1) / kTile;
  int64_t req = requested < 1 ? 1 : (requested > tiles ? tiles : requested);
  const int64_t tiles_per = (tiles + req - 1) / req;
  *chunk = tiles_per * kTile;
  *splits = (tiles + tiles_per - 1) / tiles_per;
}

}  // namespace fp8gemm::attn

using namespace fp8gemm::attn;

// Timeline trace reader of this translation unit (builds with -DFP8GEMM_TRACE only).
FP8GEMM_TRACE_READER(fp8gemm_trace_read_attention)

// The instance of a kernel template for a runtime (head_dim, norm): head_dim 64 or 128 (checked
// by the caller), norm = q and k RMS-normalized.
template <class Go>
static int32_t for_head_dim(int64_t head_dim, bool norm, Go go) {
  if (head_dim == 64) {
    return norm ? go(std::integral_constant<int, 64>{}, std::true_type{})
                : go(std::integral_constant<int, 64>{}, std::false_type{});
  }
  return norm ? go(std::integral_constant<int, 128>{}, std::true_type{})
              : go(std::integral_constant<int, 128>{}, std::false_type{});
}

// The flags of the decode-step entry points: FP8GEMM_ATTN_NO_QK_NORM or nothing.
static bool bad_flags(uint32_t flags) { return (flags & ~FP8GEMM_ATTN_NO_QK_NORM) != 0; }

extern "C" int32_t fp8gemm_qk_norm_rope_append(const void* qkv, const void* qk_norm,
                                               const void* cos_row, const void* sin_row,
                                               void* q_out, void* k_cache, void* v_cache,
                                               int64_t batch, int64_t tokens, int64_t hq,
                                               int64_t hkv, int64_t head_dim, int64_t cap,
                                               int64_t offset, float eps, uint32_t flags,
                                               void* stream) {
  if ((head_dim != 64 && head_dim != 128) || batch < 1 || tokens < 1 || hq < 1 || hkv < 1 ||
      hq % hkv != 0 || hq + 2 * hkv > (1 << 20) || cap < 1 || offset < 0 ||
      tokens > cap - offset || bad_flags(flags))
    return FP8GEMM_ERR_SHAPE;
  if (!qkv || !qk_norm || !cos_row || !sin_row || !q_out || !k_cache || !v_cache)
    return FP8GEMM_ERR_ALIGN;
  if (misaligned(qkv) || misaligned(qk_norm) || misaligned(cos_row) || misaligned(sin_row) ||
      misaligned(q_out) || misaligned(k_cache) || misaligned(v_cache))
    return FP8GEMM_ERR_ALIGN;
  if (batch > (int64_t(1) << 40) / tokens) return FP8GEMM_ERR_SHAPE;
  const int64_t warps = batch * tokens * (hq + 2 * hkv);
  const int64_t blocks = (warps + kThreads / 32 - 1) / (kThreads / 32);
  if (blocks > 0x7fffffff) return FP8GEMM_ERR_SHAPE;
  const bool norm = (flags & FP8GEMM_ATTN_NO_QK_NORM) == 0;
  return for_head_dim(head_dim, norm, [&](auto d, auto n) {
    return fp8gemm::launch_pdl(qk_norm_rope_append_kernel<decltype(d)::value, decltype(n)::value>,
                               dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0,
                               static_cast<cudaStream_t>(stream),
                               static_cast<const __nv_bfloat16*>(qkv),
                               static_cast<const __nv_bfloat16*>(qk_norm),
                               static_cast<const __nv_bfloat16*>(cos_row),
                               static_cast<const __nv_bfloat16*>(sin_row),
                               static_cast<__nv_bfloat16*>(q_out),
                               static_cast<__nv_bfloat16*>(k_cache),
                               static_cast<__nv_bfloat16*>(v_cache), batch, tokens,
                               static_cast<int>(hq), static_cast<int>(hkv), cap, offset, eps);
  });
}

extern "C" size_t fp8gemm_decode_attention_workspace_bytes(int64_t batch, int64_t hq,
                                                           int64_t splits) {
  if (splits <= 1 || batch < 1 || hq < 1) return 0;
  return static_cast<size_t>(batch * hq * splits) * (kWsStride + 2) * sizeof(float);
}

// The attention kernel instance for p.rep query heads per CTA (the next power of two).
template <bool kFused, int kD, bool kNorm>
static int32_t launch_for_rep(const DecodeParams& p, dim3 grid, unsigned cluster_x,
                              cudaStream_t s) {
  auto go = [&](auto kern) {
    return fp8gemm::launch_pdl_cluster(kern, grid, dim3(kThreads), 0, s, cluster_x, p);
  };
  if (p.rep <= 1) return go(decode_attention_kernel<1, kFused, kD, kNorm>);
  if (p.rep <= 2) return go(decode_attention_kernel<2, kFused, kD, kNorm>);
  if (p.rep <= 4) return go(decode_attention_kernel<4, kFused, kD, kNorm>);
  if (p.rep <= 8) return go(decode_attention_kernel<8, kFused, kD, kNorm>);
  return go(decode_attention_kernel<16, kFused, kD, kNorm>);
}

// Validates the shape and output arguments common to both attention entry points, plans the
// position splits and launches the attention (fused or not; `norm`: the fused prologue's RMSNorm)
// and, with several position splits, the combine kernel.
static int32_t launch_attention(DecodeParams p, bool fused, int64_t head_dim, bool norm,
                                int64_t requested_splits, int64_t head_splits, void* workspace,
                                size_t workspace_bytes, unsigned* counters, cudaStream_t s) {
  const int64_t batch = p.batch, hq = p.hq, hkv = p.hkv;
  if (head_splits < 1 || p.n_rep % head_splits != 0 || hkv * head_splits > 65535)
    return FP8GEMM_ERR_SHAPE;
  if ((p.qa == nullptr && p.out == nullptr) || (p.qa != nullptr && p.sa == nullptr))
    return FP8GEMM_ERR_ALIGN;
  // head_dim 64: a 128-wide quantization group spans two heads, which need not share a CTA.
  if (head_dim != kMaxHeadDim && p.qa != nullptr) return FP8GEMM_ERR_SHAPE;
  if (misaligned(p.qa) || misaligned(p.sa) || misaligned(p.out)) return FP8GEMM_ERR_ALIGN;
  p.m_pad = (batch + 3) / 4 * 4;
  p.head_splits = static_cast<int>(head_splits);
  p.rep = static_cast<int>(p.n_rep / head_splits);
  int64_t n_splits, chunk;
  split_plan(p.len, requested_splits, &n_splits, &chunk);
  if (n_splits > 0x7fffffff) return FP8GEMM_ERR_SHAPE;
  p.splits = static_cast<int>(n_splits);
  p.chunk = chunk;
  // The fused kernel merges its splits itself: with `counters`, the last split to finish
  // (through the workspace, any number of splits); else up to kMaxClusterSplits inside a
  // cluster (no workspace). Otherwise the combine kernel does.
  p.counters = fused && n_splits > 1 ? counters : nullptr;
  p.cluster_merge = fused && n_splits > 1 && !p.counters && n_splits <= kMaxClusterSplits;
  if (n_splits > 1 && !p.cluster_merge) {
    const size_t need = fp8gemm_decode_attention_workspace_bytes(batch, hq, n_splits);
    if (workspace == nullptr || workspace_bytes < need || misaligned(workspace))
      return FP8GEMM_ERR_WORKSPACE;
    p.ws_o = static_cast<float*>(workspace);
    p.ws_ml = p.ws_o + batch * hq * n_splits * kWsStride;
  }
  const dim3 grid(static_cast<unsigned>(n_splits), static_cast<unsigned>(hkv * head_splits),
                  static_cast<unsigned>(batch));
  const dim3 block(kThreads);
  const unsigned cx = p.cluster_merge ? static_cast<unsigned>(n_splits) : 1u;
  // The two-launch attention reads q, normalized or not: its instances are the norm ones.
  const int st = for_head_dim(head_dim, norm || !fused, [&](auto d, auto n) {
    constexpr int kD = decltype(d)::value;
    constexpr bool kNorm = decltype(n)::value;
    if constexpr (!kNorm) return launch_for_rep<true, kD, false>(p, grid, cx, s);
    else return fused ? launch_for_rep<true, kD, true>(p, grid, cx, s)
                      : launch_for_rep<false, kD, true>(p, grid, cx, s);
  });
  if (st != FP8GEMM_OK || n_splits == 1 || p.cluster_merge || p.counters) return st;
  const dim3 cgrid(static_cast<unsigned>(hq), static_cast<unsigned>(batch));
  return head_dim == 64 ? fp8gemm::launch_pdl(decode_combine_kernel<64>, cgrid, block, 0, s, p)
                        : fp8gemm::launch_pdl(decode_combine_kernel<128>, cgrid, block, 0, s, p);
}

static bool bad_heads(int64_t batch, int64_t hq, int64_t hkv, int64_t head_dim) {
  return (head_dim != 64 && head_dim != 128) || batch < 1 || batch > 65535 || hq < 1 ||
         hkv < 1 || hkv > 65535 || hq % hkv != 0 || hq / hkv > kMaxRep || hq > 0x7fffffff;
}

extern "C" int32_t fp8gemm_decode_attention(const void* q, const void* k_cache,
                                            const void* v_cache, int64_t batch, int64_t hq,
                                            int64_t hkv, int64_t head_dim, int64_t cap,
                                            int64_t len, int64_t splits, void* workspace,
                                            size_t workspace_bytes, uint8_t* qa, float* sa,
                                            void* out, void* stream) {
  if (bad_heads(batch, hq, hkv, head_dim) || len < 1 || len > cap) return FP8GEMM_ERR_SHAPE;
  if (!q || !k_cache || !v_cache) return FP8GEMM_ERR_ALIGN;
  if (misaligned(q) || misaligned(k_cache) || misaligned(v_cache)) return FP8GEMM_ERR_ALIGN;
  DecodeParams p = {};
  p.q = static_cast<const __nv_bfloat16*>(q);
  p.k = static_cast<const __nv_bfloat16*>(k_cache);
  p.v = static_cast<const __nv_bfloat16*>(v_cache);
  p.qa = qa;
  p.sa = sa;
  p.out = static_cast<__nv_bfloat16*>(out);
  p.batch = batch;
  p.cap = cap;
  p.len = len;
  p.hq = static_cast<int>(hq);
  p.hkv = static_cast<int>(hkv);
  p.n_rep = static_cast<int>(hq / hkv);
  return launch_attention(p, false, head_dim, true, splits, 1, workspace, workspace_bytes,
                          nullptr, static_cast<cudaStream_t>(stream));
}

extern "C" int32_t fp8gemm_decode_step_attention(
    const void* qkv, const void* qk_norm, const void* cos_row, const void* sin_row,
    void* k_cache, void* v_cache, int64_t batch, int64_t hq, int64_t hkv, int64_t head_dim,
    int64_t cap, int64_t offset, float eps, uint32_t flags, int64_t splits, int64_t head_splits,
    void* workspace, size_t workspace_bytes, uint32_t* counters, uint8_t* qa, float* sa,
    void* out, void* stream) {
  if (bad_heads(batch, hq, hkv, head_dim) || cap < 1 || offset < 0 || offset >= cap ||
      bad_flags(flags))
    return FP8GEMM_ERR_SHAPE;
  if (!qkv || !qk_norm || !cos_row || !sin_row || !k_cache || !v_cache) return FP8GEMM_ERR_ALIGN;
  if (misaligned(qkv) || misaligned(qk_norm) || misaligned(cos_row) || misaligned(sin_row) ||
      misaligned(k_cache) || misaligned(v_cache))
    return FP8GEMM_ERR_ALIGN;
  DecodeParams p = {};
  p.k = static_cast<const __nv_bfloat16*>(k_cache);
  p.v = static_cast<const __nv_bfloat16*>(v_cache);
  p.k_out = static_cast<__nv_bfloat16*>(k_cache);
  p.v_out = static_cast<__nv_bfloat16*>(v_cache);
  p.qkv = static_cast<const __nv_bfloat16*>(qkv);
  p.norm_w = static_cast<const __nv_bfloat16*>(qk_norm);
  p.cos_row = static_cast<const __nv_bfloat16*>(cos_row);
  p.sin_row = static_cast<const __nv_bfloat16*>(sin_row);
  p.eps = eps;
  p.qa = qa;
  p.sa = sa;
  p.out = static_cast<__nv_bfloat16*>(out);
  p.batch = batch;
  p.cap = cap;
  p.len = offset + 1;
  p.hq = static_cast<int>(hq);
  p.hkv = static_cast<int>(hkv);
  p.n_rep = static_cast<int>(hq / hkv);
  if (misaligned(counters)) return FP8GEMM_ERR_ALIGN;
  const bool norm = (flags & FP8GEMM_ATTN_NO_QK_NORM) == 0;
  return launch_attention(p, true, head_dim, norm, splits, head_splits, workspace,
                          workspace_bytes, counters, static_cast<cudaStream_t>(stream));
}
