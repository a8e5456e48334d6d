// Prefill attention on Hopper warpgroup MMA (FlashAttention-3 style), head_dim 128: the same
// contract as prefill.cu (causal with a query offset, any GQA ratio, q read in place from the
// q|k rows, bf16 out and/or the o projection's quantized operand), faster at long prompts.
//
// Work tile: (query head, kBlockM = 128 new tokens, sequence). A persistent grid (one CTA per
// SM) walks the work tiles longest first; each CTA has three warpgroups:
//   - a producer (one thread, registers given back with setmaxnreg) loads a work tile's Q once
//     and its K / V tiles of kBlockN = 128 keys by TMA into a kStages ring (128B swizzle,
//     mbarriers), the next work tile's Q and first keys while the consumers finish this one;
//     the key maps end at the sequence's valid length, so keys past it arrive as zeros (never
//     the NaN a recycled cache may hold there);
//   - two consumers of 64 query rows each: S = Q·Kᵀ by wgmma (both operands K-major in shared
//     memory), the online softmax in f32 registers (log2 domain), P rounded to bf16 in the
//     registers that are the A operand of O += P·V (V the MN-major B operand, no transpose).
// Consumer loop, software pipelined (FA3's intra-warpgroup overlap): the Q·Kᵀ of tile j+1 is
// issued before the softmax of tile j runs and the P·V of tile j is issued right after it, so
// the tensor cores work while the softmax's exp2 and shuffles run; the two consumers also take
// turns to issue (ping-pong), so one's softmax runs under the other's MMAs.
// Query token i of a sequence sits at position offset + i and sees cache positions
// [0, offset + i]; key tiles past a work tile's last row are never loaded, and only the tiles
// that cross a row's position or the end of the keys are masked.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <mutex>

#include "api.h"
#include "fp8gemm/common/act_quant.cuh"
#include "fp8gemm/common/launch_pdl.cuh"
#include "fp8gemm/ptx/mbarrier.cuh"
#include "fp8gemm/ptx/tma.cuh"
#include "fp8gemm/ptx/wgmma.cuh"
#include "fp8gemm/ptx/wgmma_bf16.cuh"

namespace fp8gemm::prefill_wgmma {

using namespace fp8gemm::ptx;

constexpr int kD = 128;
constexpr int kBlockM = 128;  // query rows per CTA: 64 per consumer warpgroup
constexpr int kBlockN = 128;  // keys per tile
constexpr int kStages = 2;
constexpr int kConsumers = kBlockM / 64;
constexpr int kThreads = 128 * (kConsumers + 1);
constexpr float kLog2e = 1.4426950408889634f;

// Shared memory: tiles as [2 column halves][rows][64 bf16] (a 128-byte row per half, the TMA
// box and the wgmma canonical 128B-swizzle layout): Q, the K and V rings, the output staging,
// then the barriers and the row scales.
constexpr int kQHalf = kBlockM * 128, kKVHalf = kBlockN * 128;
constexpr int kQBytes = 2 * kQHalf, kKVBytes = 2 * kKVHalf;
constexpr int kKOff = kQBytes;
constexpr int kVOff = kKOff + kStages * kKVBytes;
constexpr int kOOff = kVOff + kStages * kKVBytes;  // the output tile's bf16 staging, as Q's
constexpr int kBarOff = kOOff + kQBytes;
constexpr int kScaleOff = kBarOff + 8 * (2 + 4 * kStages);
constexpr int kSmem = kScaleOff + 4 * kBlockM + 1024;  // + slack to align the base to 1024

struct Params {
  __nv_bfloat16* out;  // [batch * t, hq * d] or null
  uint8_t* qa;         // [batch * t, hq * d] e4m3 or null
  float* sa;           // [hq][m_pad]
  int64_t t, offset, m_pad;
  int hq, hkv, batch;
  int m_tiles;  // query tiles per sequence
  int total;    // work tiles: m_tiles * hq * batch
};

struct Barriers {
  uint64_t q_full, q_empty;
  uint64_t k_full[kStages], v_full[kStages];
  uint64_t k_empty[kStages], v_empty[kStages];
};

// S = Q·Kᵀ for the warpgroup's 64 rows and one key tile: 8 k16 steps over head_dim; within a
// 64-wide half a step is 32 bytes along the swizzled row (the hardware applies the swizzle).
__device__ __forceinline__ void issue_qk(uint32_t q_addr, uint32_t k_addr, float (&s)[kBlockN / 2]) {
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    const uint64_t da = make_smem_desc_sw128(q_addr + (kk / 4) * kQHalf + (kk % 4) * 32, 16, 1024);
    const uint64_t db = make_smem_desc_sw128(k_addr + (kk / 4) * kKVHalf + (kk % 4) * 32, 16, 1024);
    WgmmaBf16SS<kBlockN>::mma(da, db, s, kk > 0);
  }
}

// O += P·V: 8 k16 steps over the tile's keys (16 keys = 2048 bytes of each half); V is MN-major
// (head_dim contiguous): LBO = the second 64-column half, SBO = the next 8 keys.
__device__ __forceinline__ void issue_pv(const uint32_t (&pa)[kBlockN / 16][4], uint32_t v_addr, float (&o)[kD / 2]) {
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk)
    WgmmaBf16RS<kD>::mma(pa[kk], make_smem_desc_sw128(v_addr + kk * 2048, kKVHalf, 1024), o, true);
}

// Ping-pong: the two consumer warpgroups take turns to issue their MMAs (named barrier 1 + w is
// warpgroup w's turn; 0 is __syncthreads), so one's softmax runs while the other's MMAs do.
constexpr bool kPingPong = true;
static_assert(!kPingPong || kConsumers == 2, "the ping-pong alternates two warpgroups");
__device__ __forceinline__ void turn_wait(int wg) {
  if constexpr (kPingPong) named_barrier_sync(1 + wg, 256);
}
__device__ __forceinline__ void turn_pass(int wg) {
  if constexpr (kPingPong) named_barrier_arrive(1 + (wg ^ 1), 256);
}

template <int N>
__device__ __forceinline__ void fence_acc(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) fence_operand(r[i]);
}

// 2^x by the MUFU unit alone (flushes results below 2^-126 to 0: p that small changes no sum).
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Per-thread view of a wgmma m64nN f32 accumulator: element i holds row (warp's 16-row band) +
// lane / 4 + 8 * ((i / 2) % 2), column 8 * (i / 4) + 2 * (lane % 4) + i % 2.
struct Softmax {
  float row_max[2], row_sum[2];  // log2-domain running max; this thread's partial sums

  // Masks keys past a row's position or past the valid keys (only when the tile needs it),
  // updates the running max, turns s into p = exp2(s·log2e − max) and returns the factors
  // (alpha) by which the rows' earlier sums and outputs must shrink.
  __device__ __forceinline__ void step(float (&s)[kBlockN / 2], bool mask, int64_t key0, int64_t pos0,
                                       int64_t len, int lane, float (&alpha)[2]) {
    if (mask) {
#pragma unroll
      for (int i = 0; i < kBlockN / 2; ++i) {
        const int64_t key = key0 + 8 * (i / 4) + 2 * (lane % 4) + (i % 2);
        const int64_t pos = pos0 + 8 * ((i / 2) % 2);
        if (key > pos || key >= len) s[i] = -INFINITY;
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float raw = s[2 * r];
#pragma unroll
      for (int c = 0; c < kBlockN / 8; ++c) raw = fmaxf(raw, fmaxf(s[4 * c + 2 * r], s[4 * c + 2 * r + 1]));
      raw = fmaxf(raw, __shfl_xor_sync(0xffffffffu, raw, 1));
      raw = fmaxf(raw, __shfl_xor_sync(0xffffffffu, raw, 2));
      // Rounding is monotonic: max(s)·log2e is max(s·log2e). The first tile holds key 0, which
      // every row sees: the max is finite from then on.
      const float mx = fmaxf(row_max[r], raw * kLog2e);
      alpha[r] = ex2(row_max[r] - mx);
      row_max[r] = mx;
      float sum = 0.f;
#pragma unroll
      for (int c = 0; c < kBlockN / 8; ++c) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[4 * c + 2 * r + e];
          x = ex2(fmaf(x, kLog2e, -mx));
          sum += x;
        }
      }
      row_sum[r] = row_sum[r] * alpha[r] + sum;
    }
  }
};

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The scores' accumulator layout is the A fragment's: n8 columns 2kk and 2kk + 1 make k16 step kk.
__device__ __forceinline__ void to_a_operand(const float (&s)[kBlockN / 2], uint32_t (&pa)[kBlockN / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk) {
    pa[kk][0] = pack_bf16(s[8 * kk + 0], s[8 * kk + 1]);
    pa[kk][1] = pack_bf16(s[8 * kk + 2], s[8 * kk + 3]);
    pa[kk][2] = pack_bf16(s[8 * kk + 4], s[8 * kk + 5]);
    pa[kk][3] = pack_bf16(s[8 * kk + 6], s[8 * kk + 7]);
  }
}

__device__ __forceinline__ void rescale(float (&o)[kD / 2], const float (&alpha)[2]) {
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) o[i] *= alpha[(i / 2) % 2];
}

// Byte offset of element (row, col) of a [2][rows][64] 128B-swizzled tile (16-byte chunk c of a
// 128-byte row sits at c ^ (row % 8)).
template <int kHalf>
__device__ __forceinline__ uint32_t swz_off(int row, int col) {
  return (col / 64) * kHalf + row * 128 + ((((col % 64) / 8) ^ (row % 8)) << 4) + (col % 8) * 2;
}

// One work tile: kBlockM query rows from i0 of sequence b, head h, and its key tiles.
struct Tile {
  int h, b, n_tiles;
  int64_t i0;
};

// Work tile l of the persistent schedule: the longest (last) query tiles first, all heads and
// sequences of one query tile next to each other (the CTAs running at once share K/V in L2).
__device__ __forceinline__ Tile tile_at(int l, const Params& p) {
  const int per = p.hq * p.batch, y = l / per, rem = l % per;
  Tile w;
  w.h = rem % p.hq;
  w.b = rem / p.hq;
  w.i0 = static_cast<int64_t>(p.m_tiles - 1 - y) * kBlockM;
  const int64_t kv_end = min(p.offset + p.t, p.offset + w.i0 + kBlockM);  // keys its last row sees
  w.n_tiles = static_cast<int>((kv_end + kBlockN - 1) / kBlockN);
  return w;
}

template <bool kQuant>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_wgmma_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                         const __grid_constant__ CUtensorMap tv, const Params p) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  auto* bar = reinterpret_cast<Barriers*>(smem + kBarOff);
  auto* s_scale = reinterpret_cast<float*>(smem + kScaleOff);
  const int64_t len = p.offset + p.t;
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    mbarrier_init(&bar->q_full, 1);
    mbarrier_init(&bar->q_empty, kConsumers * 4);  // one arrive per consumer warp
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(&bar->k_full[s], 1);
      mbarrier_init(&bar->v_full[s], 1);
      mbarrier_init(&bar->k_empty[s], kConsumers * 4);
      mbarrier_init(&bar->v_empty[s], kConsumers * 4);
    }
    fence_barrier_init();
  }
  __syncthreads();
  // q and the cache come from the kernels before (RoPE, the append), and the outputs may still
  // be read by them: wait for them (PDL).
  griddep_wait();

  if (wg == kConsumers) {
    // Producer: Q of each work tile once the consumers' Q·Kᵀ of the previous one is done, then
    // its K / V tiles through the ring (kv counts the ring's uses across work tiles).
    setmaxnreg_dec<24>();
    if (threadIdx.x == kConsumers * 128) {
      prefetch_tensormap(&tq);
      prefetch_tensormap(&tk);
      prefetch_tensormap(&tv);
      int kv = 0, n = 0;
      for (int l = blockIdx.x; l < p.total; l += gridDim.x, ++n) {
        const Tile w = tile_at(l, p);
        const int32_t q_row0 = static_cast<int32_t>(w.b * p.t + w.i0);
        const int32_t bh = w.b * p.hkv + w.h / (p.hq / p.hkv);
        if (n > 0) mbarrier_wait(&bar->q_empty, (n - 1) & 1);
        mbarrier_arrive_expect_tx(&bar->q_full, kQBytes);
        tma_load_2d(smem, &tq, &bar->q_full, w.h * kD, q_row0);
        tma_load_2d(smem + kQHalf, &tq, &bar->q_full, w.h * kD + 64, q_row0);
        for (int j = 0; j < w.n_tiles; ++j, ++kv) {
          const int s = kv % kStages;
          const uint32_t parity = ((kv / kStages) + 1) & 1;  // the consumers' release of use kv - kStages
          uint8_t* sk = smem + kKOff + s * kKVBytes;
          uint8_t* sv = smem + kVOff + s * kKVBytes;
          if (kv >= kStages) mbarrier_wait(&bar->k_empty[s], parity);
          mbarrier_arrive_expect_tx(&bar->k_full[s], kKVBytes);
          tma_load_3d(sk, &tk, &bar->k_full[s], 0, j * kBlockN, bh);
          tma_load_3d(sk + kKVHalf, &tk, &bar->k_full[s], 64, j * kBlockN, bh);
          if (kv >= kStages) mbarrier_wait(&bar->v_empty[s], parity);
          mbarrier_arrive_expect_tx(&bar->v_full[s], kKVBytes);
          tma_load_3d(sv, &tv, &bar->v_full[s], 0, j * kBlockN, bh);
          tma_load_3d(sv + kKVHalf, &tv, &bar->v_full[s], 64, j * kBlockN, bh);
        }
      }
    }
    return;
  }

  // Consumer warpgroup wg: CTA rows [64 wg, 64 wg + 64); warp w of it rows 16 w + [0, 16).
  setmaxnreg_inc<240>();
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
  const int wrow = wg * 64 + warp * 16 + lane / 4;  // this thread's first row (second: + 8)
  const uint32_t base = smem_addr(smem);
  const uint32_t q_addr = base + wg * 64 * 128;
  auto release = [&](uint64_t* b) {
    __syncwarp();
    if (lane == 0) mbarrier_arrive(b);
  };
  const int64_t hd = static_cast<int64_t>(p.hq) * kD;

  int kv = 0, n = 0;
  for (int l = blockIdx.x; l < p.total; l += gridDim.x, ++n) {
    const Tile w = tile_at(l, p);
    const int64_t pos0 = p.offset + w.i0 + wrow;  // the position of this thread's first row
    const int64_t wg_first = p.offset + w.i0 + wg * 64;
    auto needs_mask = [&](int j) {
      const int64_t n0 = static_cast<int64_t>(j) * kBlockN;
      return n0 + kBlockN - 1 > wg_first || n0 + kBlockN > len;
    };

    float o[kD / 2];
#pragma unroll
    for (int i = 0; i < kD / 2; ++i) o[i] = 0.f;
    Softmax sm;
    sm.row_max[0] = sm.row_max[1] = -INFINITY;
    sm.row_sum[0] = sm.row_sum[1] = 0.f;
    float s[kBlockN / 2];
    uint32_t pa[kBlockN / 16][4];
    float alpha[2];

    // Key tile 0: scores, softmax, P. Warpgroup 0 has the first turn; each warpgroup issues
    // n_tiles + 1 times per work tile and passes the turn after each but warpgroup 1's last
    // (every arrive is waited for). Q is released after the last Q·Kᵀ.
    if (wg == 1) turn_pass(wg);
    mbarrier_wait(&bar->q_full, n & 1);
    mbarrier_wait(&bar->k_full[kv % kStages], (kv / kStages) & 1);
    turn_wait(wg);
    wgmma_fence();
    issue_qk(q_addr, base + kKOff + (kv % kStages) * kKVBytes, s);
    wgmma_commit();
    turn_pass(wg);
    wgmma_wait<0>();
    fence_acc(s);
    release(&bar->k_empty[kv % kStages]);
    if (w.n_tiles == 1) release(&bar->q_empty);
    sm.step(s, needs_mask(0), 0, pos0, len, lane, alpha);
    to_a_operand(s, pa);

    for (int j = 1; j < w.n_tiles; ++j) {
      const int cur = kv + j, prev = kv + j - 1;
      const int s_cur = cur % kStages, s_prev = prev % kStages;
      // Issue S_j = Q·K_jᵀ, then O += P_{j-1}·V_{j-1}; softmax of S_j while the P·V runs.
      mbarrier_wait(&bar->k_full[s_cur], (cur / kStages) & 1);
      turn_wait(wg);
      wgmma_fence();
      issue_qk(q_addr, base + kKOff + s_cur * kKVBytes, s);
      wgmma_commit();
      mbarrier_wait(&bar->v_full[s_prev], (prev / kStages) & 1);
      wgmma_fence();  // after the wait's branch: pa and o are the wgmma's again
      issue_pv(pa, base + kVOff + s_prev * kKVBytes, o);
      wgmma_commit();
      turn_pass(wg);
      wgmma_wait<1>();  // S_j landed
      fence_acc(s);
      release(&bar->k_empty[s_cur]);
      if (j == w.n_tiles - 1) release(&bar->q_empty);
      sm.step(s, needs_mask(j), static_cast<int64_t>(j) * kBlockN, pos0, len, lane, alpha);
      wgmma_wait<0>();  // P_{j-1}·V_{j-1} done: O may be rescaled, pa overwritten, V released
      fence_acc(o);
      release(&bar->v_empty[s_prev]);
      rescale(o, alpha);
      to_a_operand(s, pa);
    }
    {
      const int last = kv + w.n_tiles - 1, st = last % kStages;
      mbarrier_wait(&bar->v_full[st], (last / kStages) & 1);
      turn_wait(wg);
      wgmma_fence();
      issue_pv(pa, base + kVOff + st * kKVBytes, o);
      wgmma_commit();
      if (wg == 0) turn_pass(wg);
      wgmma_wait<0>();
      fence_acc(o);
      release(&bar->v_empty[st]);
    }
    kv += w.n_tiles;

    // Normalize, round to bf16 and stage this warp's 16 rows in its own rows of the output
    // tile, then 16-byte stores per row (the producer meanwhile loads the next work tile).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float lsum = sm.row_sum[r];
      lsum += __shfl_xor_sync(0xffffffffu, lsum, 1);
      lsum += __shfl_xor_sync(0xffffffffu, lsum, 2);
      const float inv = 1.f / lsum;
      const int row = wrow + 8 * r;
      float amax = 0.f;
#pragma unroll
      for (int c = 0; c < kD / 8; ++c) {
        const __nv_bfloat162 v = __floats2bfloat162_rn(o[4 * c + 2 * r] * inv, o[4 * c + 2 * r + 1] * inv);
        *reinterpret_cast<__nv_bfloat162*>(smem + kOOff + swz_off<kQHalf>(row, 8 * c + 2 * (lane % 4))) = v;
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
    __syncwarp();
    constexpr int kChunks = kD / 8;
#pragma unroll
    for (int i = lane; i < 16 * kChunks; i += 32) {
      const int r = wg * 64 + warp * 16 + i / kChunks, c = i % kChunks;
      const int64_t tok = w.i0 + r;
      if (tok >= p.t) continue;
      const int64_t row = static_cast<int64_t>(w.b) * p.t + tok;
      const uint4 v = *reinterpret_cast<const uint4*>(smem + kOOff + swz_off<kQHalf>(r, 8 * c));
      if (p.out) *reinterpret_cast<uint4*>(p.out + row * hd + w.h * kD + c * 8) = v;
      if constexpr (kQuant) {
        const float sc = s_scale[r];
        const __nv_bfloat16* x = reinterpret_cast<const __nv_bfloat16*>(&v);
        uint32_t lo = 0, hi = 0;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          lo |= static_cast<uint32_t>(quantize_e4m3(__bfloat162float(x[e]), sc)) << (8 * e);
          hi |= static_cast<uint32_t>(quantize_e4m3(__bfloat162float(x[e + 4]), sc)) << (8 * e);
        }
        *reinterpret_cast<uint2*>(p.qa + row * hd + w.h * kD + c * 8) = make_uint2(lo, hi);
        if (c == 0) p.sa[static_cast<int64_t>(w.h) * p.m_pad + row] = sc;
      }
    }
    __syncwarp();  // the warp's staged rows and scales are read before its next tile rewrites them
    if constexpr (kQuant) {
      // The scale matrix's padding rows [m, m_pad) of this head's column: zero, by one CTA.
      const int64_t m = static_cast<int64_t>(p.batch) * p.t;
      if (w.i0 == 0 && w.b == p.batch - 1 && threadIdx.x < p.m_pad - m)
        p.sa[static_cast<int64_t>(w.h) * p.m_pad + m + threadIdx.x] = 0.f;
    }
  }
}

// cuTensorMapEncodeTiled through the runtime's driver entry point (no libcuda link).
PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) ==
            cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  });
  return fn;
}

// A bf16 tensor map with a [box_rows][64] box and the 128B swizzle; dims/strides innermost first
// (strides in bytes, for dims 1.. only). Elements past dims read as zeros.
bool bf16_map(CUtensorMap* map, const void* base, int rank, const cuuint64_t* dims, const cuuint64_t* strides,
              uint32_t box_rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 enc = encode_fn();
  if (!enc) return false;
  const cuuint32_t box[3] = {64, box_rows, 1};
  const cuuint32_t estr[3] = {1, 1, 1};
  return enc(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, const_cast<void*>(base), dims, strides, box, estr,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Streaming multiprocessors of the current device (queried once per device).
int sm_count() {
  constexpr int kMaxDevices = 64;
  static int counts[kMaxDevices];
  static std::once_flag once[kMaxDevices];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return 0;
  std::call_once(once[dev], [dev] {
    if (cudaDeviceGetAttribute(&counts[dev], cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) counts[dev] = 0;
  });
  return counts[dev];
}

// Persistent launch: one CTA per SM (the shared memory allows one), each walking the work tiles.
template <bool kQuant>
int32_t launch(const CUtensorMap& tq, const CUtensorMap& tk, const CUtensorMap& tv, const Params& prm,
               cudaStream_t stream) {
  auto kern = prefill_wgmma_kernel<kQuant>;
  static const bool attr_ok =
      cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem) == cudaSuccess;
  const int sms = sm_count();
  if (!attr_ok || sms < 1) {
    (void)cudaGetLastError();
    return FP8GEMM_ERR_LAUNCH;
  }
  const int ctas = prm.total < sms ? prm.total : sms;
  return fp8gemm::launch_pdl(kern, dim3(ctas), dim3(kThreads), kSmem, stream, tq, tk, tv, prm);
}

inline bool misaligned(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) != 0; }

}  // namespace fp8gemm::prefill_wgmma

using namespace fp8gemm::prefill_wgmma;

extern "C" int32_t fp8gemm_prefill_attention_wgmma(const void* q, int64_t q_row, const void* k_cache,
                                                   const void* v_cache, int64_t batch, int64_t t, int64_t hq,
                                                   int64_t hkv, int64_t head_dim, int64_t cap, int64_t offset,
                                                   uint8_t* qa, float* sa, void* out, void* stream) {
  if (head_dim != kD || batch < 1 || t < 1 || hq < 1 || hkv < 1 || hq % hkv != 0 || hq > 65535 || offset < 0 ||
      cap < offset + t || q_row < hq * head_dim || q_row % 8 != 0 || (qa && !sa) || (!qa && !out) ||
      batch * t >= (int64_t(1) << 31) || (t + kBlockM - 1) / kBlockM * hq * batch >= (int64_t(1) << 31))
    return FP8GEMM_ERR_SHAPE;
  if (!q || !k_cache || !v_cache) return FP8GEMM_ERR_ALIGN;
  if (misaligned(q) || misaligned(k_cache) || misaligned(v_cache) || (out && misaligned(out)) ||
      (qa && misaligned(qa)) || (sa && (reinterpret_cast<uintptr_t>(sa) & 3) != 0))
    return FP8GEMM_ERR_ALIGN;
  // q: [batch * t rows, hq * d columns], rows q_row apart. k / v: [batch * hkv][len][d] inside
  // [batch * hkv][cap][d]: declaring len rows makes the positions past it read as zeros.
  CUtensorMap tq, tk, tv;
  const cuuint64_t q_dims[2] = {static_cast<cuuint64_t>(hq * kD), static_cast<cuuint64_t>(batch * t)};
  const cuuint64_t q_strides[1] = {static_cast<cuuint64_t>(q_row * 2)};
  const cuuint64_t kv_dims[3] = {kD, static_cast<cuuint64_t>(offset + t), static_cast<cuuint64_t>(batch * hkv)};
  const cuuint64_t kv_strides[2] = {kD * 2, static_cast<cuuint64_t>(cap * kD * 2)};
  if (!bf16_map(&tq, q, 2, q_dims, q_strides, kBlockM) || !bf16_map(&tk, k_cache, 3, kv_dims, kv_strides, kBlockN) ||
      !bf16_map(&tv, v_cache, 3, kv_dims, kv_strides, kBlockN))
    return FP8GEMM_ERR_TMA;
  Params prm{};
  prm.out = static_cast<__nv_bfloat16*>(out);
  prm.qa = qa;
  prm.sa = sa;
  prm.t = t;
  prm.offset = offset;
  prm.m_pad = (batch * t + 3) / 4 * 4;
  prm.hq = static_cast<int>(hq);
  prm.hkv = static_cast<int>(hkv);
  prm.batch = static_cast<int>(batch);
  prm.m_tiles = static_cast<int>((t + kBlockM - 1) / kBlockM);
  prm.total = static_cast<int>(prm.m_tiles * hq * batch);
  const auto s = static_cast<cudaStream_t>(stream);
  return qa ? launch<true>(tq, tk, tv, prm, s) : launch<false>(tq, tk, tv, prm, s);
}
