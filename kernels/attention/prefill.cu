// Prefill attention, flash style: causal, grouped-query, head_dim kD = 64 or 128, bf16 q/k/v,
// f32 scores and online softmax, no T x T buffer.
//
// One CTA per (query head, tile of kBlockM new tokens, sequence), kWarps warps of kMi 16-row MMA
// atoms each. The keys of the tile's causal range stream through shared memory kBlockN at a
// time (cp.async, swizzled rows; K of the next tile loads while P·V of this one runs, V while
// the scores run); q·kᵀ and P·V are mma.sync m16n8k16 bf16 -> f32, P rounded to bf16 between them.
// Query token i of a sequence sits at position offset + i and sees cache positions [0, offset+i]:
// a first prompt (offset 0), a later chunk of it, or a second chat turn after a cached prefix.
// The output goes out as bf16 and, at head_dim 128 (one head = one 128-wide group of the
// activation contract), optionally as the o projection's quantized operand too.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "api.h"
#include "fp8gemm/common/act_quant.cuh"
#include "fp8gemm/common/launch_pdl.cuh"

namespace fp8gemm::prefill {

constexpr int kBlockN = 64;  // keys per shared-memory tile
constexpr float kLog2e = 1.4426950408889634f;

struct Params {
  const __nv_bfloat16* q;  // token i of sequence b, head h at (b * t + i) * q_row + h * d
  const __nv_bfloat16* k;  // [batch, hkv, cap, d]
  const __nv_bfloat16* v;
  __nv_bfloat16* out;  // [batch * t, hq * d] or null
  uint8_t* qa;         // [batch * t, hq * d] e4m3 or null (d = 128)
  float* sa;           // [hq][m_pad]
  int64_t q_row, t, cap, offset, m_pad;
  int hq, hkv;
};

// Element offset of 16-byte chunk c of row r in a swizzled [rows][kD] bf16 tile: chunk c sits
// at c ^ (r % 8), so the 8 rows an ldmatrix reads hit 8 different bank groups.
template <int kD>
__device__ __forceinline__ int swz(int r, int c) {
  return r * kD + ((c ^ (r & 7)) << 3);
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared; zero-filled when !valid (src is not read then).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a · b, m16n8k16, bf16 operands, f32 accumulators.
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Rows [0, valid) of a [kRows][kD] tile from global rows `stride` elements apart; rows past
// `valid` are zero-filled (their keys are masked, and 0 · P keeps garbage out of P·V).
template <int kD, int kRows, int kThreads>
__device__ __forceinline__ void load_tile(__nv_bfloat16* s, const __nv_bfloat16* g,
                                          int64_t stride, int64_t valid, int tid) {
  constexpr int kChunks = kD / 8;
#pragma unroll
  for (int i = tid; i < kRows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool ok = r < valid;
    cp_async16(smem_u32(s + swz<kD>(r, c)), ok ? g + r * stride + c * 8 : g, ok);
  }
}

template <int kD, int kWarps, int kMi>
constexpr int smem_bytes() {
  return (16 * kWarps * kMi + 2 * kBlockN) * kD * 2;
}

template <int kD, int kWarps, int kMi, bool kQuant>
__global__ void __launch_bounds__(kWarps * 32) prefill_attention_kernel(const Params p) {
  constexpr int kThreads = kWarps * 32, kBlockM = 16 * kWarps * kMi, kChunks = kD / 8;
  constexpr int kNt = kBlockN / 8, kDt = kD / 8;  // n8 tiles of the scores / of the output
  extern __shared__ __align__(128) uint8_t smem_raw[];
  auto* sQ = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  auto* sK = sQ + kBlockM * kD;
  auto* sV = sK + kBlockN * kD;

  const int h = blockIdx.x, b = blockIdx.z;
  const int64_t i0 = static_cast<int64_t>(gridDim.y - 1 - blockIdx.y) * kBlockM;  // longest first
  const int g = h / (p.hq / p.hkv);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t len = p.offset + p.t;
  const int64_t kv_end = min(len, p.offset + i0 + kBlockM);  // keys the tile's last row sees
  const int n_tiles = static_cast<int>((kv_end + kBlockN - 1) / kBlockN);
  const __nv_bfloat16* qg = p.q + (static_cast<int64_t>(b) * p.t + i0) * p.q_row + static_cast<int64_t>(h) * kD;
  const int64_t head = (static_cast<int64_t>(b) * p.hkv + g) * p.cap * kD;
  const __nv_bfloat16* kg = p.k + head;
  const __nv_bfloat16* vg = p.v + head;
  const int wrow = warp * kMi * 16;  // the warp's first row in the tile

  // q and the cache come from the kernels before (RoPE, the append): wait for them (PDL).
  asm volatile("griddepcontrol.wait;" ::: "memory");
  load_tile<kD, kBlockM, kThreads>(sQ, qg, p.q_row, p.t - i0, tid);
  load_tile<kD, kBlockN, kThreads>(sK, kg, kD, len, tid);
  cp_async_commit();

  uint32_t qf[kMi][kD / 16][4];
  float o[kMi][kDt][4];
  float row_max[kMi][2], row_sum[kMi][2];
#pragma unroll
  for (int mi = 0; mi < kMi; ++mi) {
#pragma unroll
    for (int d = 0; d < kDt; ++d) o[mi][d][0] = o[mi][d][1] = o[mi][d][2] = o[mi][d][3] = 0.f;
    row_max[mi][0] = row_max[mi][1] = -INFINITY;
    row_sum[mi][0] = row_sum[mi][1] = 0.f;
  }

  for (int j = 0; j < n_tiles; ++j) {
    const int64_t n0 = static_cast<int64_t>(j) * kBlockN;
    cp_async_wait_all();
    __syncthreads();  // K[j] (and q) landed; every warp is done with V[j-1]
    if (j == 0) {
#pragma unroll
      for (int mi = 0; mi < kMi; ++mi)
#pragma unroll
        for (int kk = 0; kk < kD / 16; ++kk)
          ldsm_x4(smem_u32(sQ + swz<kD>(wrow + mi * 16 + lane % 16, kk * 2 + lane / 16)), qf[mi][kk]);
    }
    load_tile<kD, kBlockN, kThreads>(sV, vg + n0 * kD, kD, len - n0, tid);
    cp_async_commit();

    // Scores S = q · kᵀ of the warp's rows and the tile's 64 keys.
    float s[kMi][kNt][4];
#pragma unroll
    for (int mi = 0; mi < kMi; ++mi)
#pragma unroll
      for (int n = 0; n < kNt; ++n) s[mi][n][0] = s[mi][n][1] = s[mi][n][2] = s[mi][n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < kNt / 2; ++np) {
        uint32_t bk[4];
        ldsm_x4(smem_u32(sK + swz<kD>(np * 16 + lane % 8 + (lane / 16) * 8, kk * 2 + (lane / 8) % 2)), bk);
#pragma unroll
        for (int mi = 0; mi < kMi; ++mi) {
          mma(s[mi][2 * np], qf[mi][kk], bk[0], bk[1]);
          mma(s[mi][2 * np + 1], qf[mi][kk], bk[2], bk[3]);
        }
      }
    }

    // Causal mask (and the end of the cache), only on tiles that cross a row's position.
    const int64_t first_pos = p.offset + i0 + wrow;  // the warp's smallest query position
    if (n0 + kBlockN - 1 > first_pos || n0 + kBlockN > len) {
#pragma unroll
      for (int mi = 0; mi < kMi; ++mi)
#pragma unroll
        for (int n = 0; n < kNt; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int64_t key = n0 + n * 8 + 2 * (lane % 4) + (e & 1);
            const int64_t pos = first_pos + mi * 16 + lane / 4 + (e >= 2 ? 8 : 0);
            if (key > pos || key >= len) s[mi][n][e] = -INFINITY;
          }
    }

    // Online softmax in the log2 domain. Every row sees key 0 in tile 0, so its max is finite
    // from the first tile on (no -inf - -inf).
    uint32_t pa[kMi][kBlockN / 16][4];
#pragma unroll
    for (int mi = 0; mi < kMi; ++mi) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = row_max[mi][r];
#pragma unroll
        for (int n = 0; n < kNt; ++n) mx = fmaxf(mx, fmaxf(s[mi][n][2 * r], s[mi][n][2 * r + 1]) * kLog2e);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float alpha = exp2f(row_max[mi][r] - mx);
        row_max[mi][r] = mx;
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < kNt; ++n) {
#pragma unroll
          for (int e = 2 * r; e < 2 * r + 2; ++e) {
            s[mi][n][e] = exp2f(fmaf(s[mi][n][e], kLog2e, -mx));
            sum += s[mi][n][e];
          }
        }
        row_sum[mi][r] = row_sum[mi][r] * alpha + sum;
#pragma unroll
        for (int d = 0; d < kDt; ++d) {
          o[mi][d][2 * r] *= alpha;
          o[mi][d][2 * r + 1] *= alpha;
        }
      }
      // The scores' accumulator layout is the A operand's: two n8 tiles make one k16 step.
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        pa[mi][kk][0] = pack_bf16(s[mi][2 * kk][0], s[mi][2 * kk][1]);
        pa[mi][kk][1] = pack_bf16(s[mi][2 * kk][2], s[mi][2 * kk][3]);
        pa[mi][kk][2] = pack_bf16(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
        pa[mi][kk][3] = pack_bf16(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
      }
    }

    cp_async_wait_all();
    __syncthreads();  // V[j] landed; every warp is done with K[j]
    if (j + 1 < n_tiles) {
      load_tile<kD, kBlockN, kThreads>(sK, kg + (n0 + kBlockN) * kD, kD, len - n0 - kBlockN, tid);
      cp_async_commit();
    }

    // O += P · V.
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
#pragma unroll
      for (int dp = 0; dp < kDt / 2; ++dp) {
        uint32_t bv[4];
        ldsm_x4_t(smem_u32(sV + swz<kD>(kk * 16 + lane % 8 + ((lane / 8) % 2) * 8, dp * 2 + lane / 16)), bv);
#pragma unroll
        for (int mi = 0; mi < kMi; ++mi) {
          mma(o[mi][2 * dp], pa[mi][kk], bv[0], bv[1]);
          mma(o[mi][2 * dp + 1], pa[mi][kk], bv[2], bv[3]);
        }
      }
    }
  }

  // Normalize, round to bf16 and stage the warp's rows in its own rows of sQ (only this warp
  // read them), then 16-byte stores (and the quantized operand) per row.
  __shared__ float s_scale[kBlockM];
#pragma unroll
  for (int mi = 0; mi < kMi; ++mi) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = row_sum[mi][r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = 1.f / l;
      const int row = wrow + mi * 16 + lane / 4 + 8 * r;
      float amax = 0.f;
#pragma unroll
      for (int d = 0; d < kDt; ++d) {
        const __nv_bfloat162 v = __floats2bfloat162_rn(o[mi][d][2 * r] * inv, o[mi][d][2 * r + 1] * inv);
        *reinterpret_cast<__nv_bfloat162*>(sQ + swz<kD>(row, d) + 2 * (lane % 4)) = v;
        if constexpr (kQuant) {
          amax = max_nan(amax, fabsf(__bfloat162float(v.x)));
          amax = max_nan(amax, fabsf(__bfloat162float(v.y)));
        }
      }
      if constexpr (kQuant) {
        amax = max_nan(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
        amax = max_nan(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
        if (lane % 4 == 0) s_scale[row] = act_scale(amax);
      }
    }
  }
  __syncwarp();
  const int64_t m = static_cast<int64_t>(gridDim.z) * p.t;
  const int64_t hd = static_cast<int64_t>(p.hq) * kD;
#pragma unroll
  for (int i = lane; i < kMi * 16 * kChunks; i += 32) {
    const int r = wrow + i / kChunks, c = i % kChunks;
    const int64_t tok = i0 + r;
    if (tok >= p.t) continue;
    const int64_t row = static_cast<int64_t>(b) * p.t + tok;
    const uint4 v = *reinterpret_cast<const uint4*>(sQ + swz<kD>(r, c));
    if (p.out) *reinterpret_cast<uint4*>(p.out + row * hd + h * kD + c * 8) = v;
    if constexpr (kQuant) {
      const float sc = s_scale[r];
      const __nv_bfloat16* x = reinterpret_cast<const __nv_bfloat16*>(&v);
      uint32_t lo = 0, hi = 0;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        lo |= static_cast<uint32_t>(quantize_e4m3(__bfloat162float(x[e]), sc)) << (8 * e);
        hi |= static_cast<uint32_t>(quantize_e4m3(__bfloat162float(x[e + 4]), sc)) << (8 * e);
      }
      *reinterpret_cast<uint2*>(p.qa + row * hd + h * kD + c * 8) = make_uint2(lo, hi);
      if (c == 0) p.sa[static_cast<int64_t>(h) * p.m_pad + row] = sc;
    }
  }
  if constexpr (kQuant) {
    // The scale matrix's padding rows [m, m_pad) of this head's column: zero, by one CTA.
    if (blockIdx.y == 0 && b == static_cast<int>(gridDim.z) - 1 && tid < p.m_pad - m)
      p.sa[static_cast<int64_t>(h) * p.m_pad + m + tid] = 0.f;
  }
}

inline bool misaligned(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) != 0; }

template <int kD, int kWarps, int kMi, bool kQuant>
int32_t launch(const Params& prm, int64_t batch, cudaStream_t stream) {
  constexpr int kBlockM = 16 * kWarps * kMi;
  constexpr int kSmem = smem_bytes<kD, kWarps, kMi>();
  auto kern = prefill_attention_kernel<kD, kWarps, kMi, kQuant>;
  static const bool attr_ok =
      cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem) == cudaSuccess;
  if (!attr_ok) {
    (void)cudaGetLastError();
    return FP8GEMM_ERR_LAUNCH;
  }
  const int64_t tiles = (prm.t + kBlockM - 1) / kBlockM;
  if (tiles > 65535 || batch > 65535) return FP8GEMM_ERR_SHAPE;
  return fp8gemm::launch_pdl(kern, dim3(prm.hq, static_cast<unsigned>(tiles), static_cast<unsigned>(batch)),
                             dim3(kWarps * 32), kSmem, stream, prm);
}

}  // namespace fp8gemm::prefill

using namespace fp8gemm::prefill;

extern "C" int32_t fp8gemm_prefill_attention(const void* q, int64_t q_row, const void* k_cache,
                                             const void* v_cache, int64_t batch, int64_t t,
                                             int64_t hq, int64_t hkv, int64_t head_dim,
                                             int64_t cap, int64_t offset, uint8_t* qa, float* sa,
                                             void* out, void* stream) {
  if ((head_dim != 64 && head_dim != 128) || batch < 1 || t < 1 || hq < 1 || hkv < 1 ||
      hq % hkv != 0 || hq > 65535 || offset < 0 || cap < offset + t || q_row < hq * head_dim ||
      q_row % 8 != 0 || (qa && head_dim != 128) || (qa && !sa) || (!qa && !out))
    return FP8GEMM_ERR_SHAPE;
  if (!q || !k_cache || !v_cache) return FP8GEMM_ERR_ALIGN;
  if (misaligned(q) || misaligned(k_cache) || misaligned(v_cache) || (out && misaligned(out)) ||
      (qa && misaligned(qa)) || (sa && (reinterpret_cast<uintptr_t>(sa) & 3) != 0))
    return FP8GEMM_ERR_ALIGN;
  Params prm{};
  prm.q = static_cast<const __nv_bfloat16*>(q);
  prm.k = static_cast<const __nv_bfloat16*>(k_cache);
  prm.v = static_cast<const __nv_bfloat16*>(v_cache);
  prm.out = static_cast<__nv_bfloat16*>(out);
  prm.qa = qa;
  prm.sa = sa;
  prm.q_row = q_row;
  prm.t = t;
  prm.cap = cap;
  prm.offset = offset;
  prm.m_pad = (batch * t + 3) / 4 * 4;
  prm.hq = static_cast<int>(hq);
  prm.hkv = static_cast<int>(hkv);
  const auto s = static_cast<cudaStream_t>(stream);
  if (head_dim == 64) return launch<64, 4, 1, false>(prm, batch, s);
  return qa ? launch<128, 4, 1, true>(prm, batch, s) : launch<128, 4, 1, false>(prm, batch, s);
}
