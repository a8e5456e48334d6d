// Mixture-of-experts routing on the device (declarations: api.h), around the masked grouped
// GEMMs (gemm/grouped.cu), so that a layer never reads its routing on the host:
//   fp8gemm_moe_route           softmax + top-k (+ renormalisation) of the router logits, and
//                               the tokens' slots in the masked layout [experts][max_m]
//                               (experts ascending, each expert's tokens in token order);
//   fp8gemm_moe_gather_quant    each token's row quantized once (the activation contract) and
//                               copied into its slots of the masked GEMM operand;
//   fp8gemm_moe_combine         each token's weighted expert outputs summed in ascending expert
//                               order, in f32 (mul, then add: no FMA), as the host path's
//                               scatter-add does.
// Every output depends only on the inputs (no atomics): the same bits at every call.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "api.h"
#include "fp8gemm/common/act_quant.cuh"
#include "fp8gemm/common/launch_pdl.cuh"
#include "fp8gemm/ptx/tma.cuh"

namespace fp8gemm {
namespace moe {

constexpr uint32_t kNoSlot = 0xffffffffu;
constexpr int kMaxExpertsPerLane = 8;  // experts <= 256
constexpr int kMaxTopK = 32;

constexpr int kNone = 0x7fffffff;  // no expert (behind every expert in `ahead`)

// (p, index) ordering of the routing: the larger probability first, the lower expert on ties;
// any expert is ahead of kNone.
__device__ __forceinline__ bool ahead(float p, int i, float q, int j) {
  return i != kNone && (j == kNone || p > q || (p == q && i < j));
}

// One CTA of 32 warps. Phase 1, a warp per token: softmax over the experts (max, then the sum of
// exp(l - max) by a fixed butterfly), top_k selections of the (probability, index) maximum, the
// weights renormalised by their sum in selection order. Phase 2, a warp per local expert: its
// entries of ids, in token order, ranked by ballots; entry i's slot is e_local * max_m + rank.
__global__ void __launch_bounds__(1024) route_kernel(const float* __restrict__ logits, int m, int experts,
                                                     int top_k, int norm, int first, int local, int max_m,
                                                     uint32_t* __restrict__ ids, float* __restrict__ weights,
                                                     uint32_t* __restrict__ pos, uint32_t* __restrict__ counts) {
  ptx::griddep_launch_dependents();
  ptx::griddep_wait();  // the logits are the previous kernel's; ids .. counts may still be read
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int t = warp; t < m; t += warps) {
    const float* row = logits + static_cast<int64_t>(t) * experts;
    float l[kMaxExpertsPerLane];
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < kMaxExpertsPerLane; ++i) {
      const int e = lane + 32 * i;
      l[i] = e < experts ? row[e] : -INFINITY;
      mx = max_nan(mx, l[i]);
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) mx = max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxExpertsPerLane; ++i) {
      l[i] = lane + 32 * i < experts ? expf(l[i] - mx) : 0.f;
      sum += l[i];
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    // Selection keys: a NaN probability (a non-finite logit) sorts last (its weight stays NaN);
    // `taken` marks this lane's experts already chosen.
    float key[kMaxExpertsPerLane];
#pragma unroll
    for (int i = 0; i < kMaxExpertsPerLane; ++i) {
      l[i] = __fdiv_rn(l[i], sum);
      key[i] = isnan(l[i]) ? -INFINITY : l[i];
    }
    uint32_t taken = 0;
    float chosen_sum = 0.f, mine = 0.f;  // lane j keeps selection j's probability
    uint32_t mine_id = 0;
    for (int j = 0; j < top_k; ++j) {
      float bp = -INFINITY, bv = 0.f;
      int bi = kNone;
#pragma unroll
      for (int i = 0; i < kMaxExpertsPerLane; ++i) {
        const int e = lane + 32 * i;
        if (e < experts && !(taken >> i & 1u) && ahead(key[i], e, bp, bi)) bp = key[i], bi = e, bv = l[i];
      }
#pragma unroll
      for (int o = 16; o > 0; o /= 2) {
        const float op = __shfl_xor_sync(0xffffffffu, bp, o), ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ahead(op, oi, bp, bi)) bp = op, bi = oi, bv = ov;
      }
      if (bi % 32 == lane) taken |= 1u << (bi / 32);
      chosen_sum += bv;  // in selection order, as the host path sums
      if (lane == j) mine = bv, mine_id = static_cast<uint32_t>(bi);
    }
    if (lane < top_k) {
      const int64_t o = static_cast<int64_t>(t) * top_k + lane;
      ids[o] = mine_id;
      weights[o] = norm ? __fdiv_rn(mine, chosen_sum) : mine;
      pos[o] = kNoSlot;
    }
  }
  __syncthreads();  // ids and the kNoSlot defaults are written (global memory, this CTA)
  const int entries = m * top_k;
  for (int el = warp; el < local; el += warps) {
    const uint32_t e = static_cast<uint32_t>(first + el);
    int rank = 0;
    for (int base = 0; base < entries; base += 32) {
      const int i = base + lane;
      const bool hit = i < entries && ids[i] == e;
      const uint32_t ballot = __ballot_sync(0xffffffffu, hit);
      const int r = rank + __popc(ballot & ((1u << lane) - 1u));
      if (hit && r < max_m) pos[i] = static_cast<uint32_t>(el) * max_m + r;
      rank += __popc(ballot);
    }
    if (lane == 0) counts[el] = static_cast<uint32_t>(rank < max_m ? rank : max_m);
  }
}

// One CTA per token, 128 threads: each 128-column group quantized as gemm/quant.cu does (16
// lanes x 8 bf16 or 32 lanes x 4 f32), then stored into each of the token's slots: q row `slot`,
// its scale at [expert][group][slot % max_m] of the per-expert MN-major scale blocks.
template <typename T, bool kRagged>
__global__ void __launch_bounds__(128) gather_quant_kernel(const T* __restrict__ x, int64_t k, int top_k,
                                                           const uint32_t* __restrict__ pos, int64_t max_m,
                                                           uint8_t* __restrict__ q, float* __restrict__ sa) {
  ptx::griddep_launch_dependents();  // the grouped GEMM prefetches its weights meanwhile
  ptx::griddep_wait();
  constexpr int kVals = 16 / sizeof(T);
  constexpr int kLanes = 128 / kVals;
  constexpr int kGroupsPerPass = 128 / kLanes;
  __shared__ uint32_t slot[kMaxTopK];
  const int64_t t = blockIdx.x;
  if (threadIdx.x < top_k) slot[threadIdx.x] = pos[t * top_k + threadIdx.x];
  __syncthreads();
  const int64_t kb = (k + 127) / 128, m_pad = (max_m + 3) / 4 * 4;
  const int sub = threadIdx.x % kLanes;
  for (int64_t g = threadIdx.x / kLanes; g - threadIdx.x / kLanes < kb; g += kGroupsPerPass) {
    const bool valid = g < kb;
    const int64_t col = g * 128 + sub * kVals;
    const bool live = valid && (!kRagged || col < k);
    float v[kVals];
    load_group_vec(x + t * k + col, live, v);
    const float s = group_scale<kLanes>(v);
    if (!live) continue;
    const uint2 codes = pack_codes(v, s);
    for (int j = 0; j < top_k; ++j) {
      const uint32_t p = slot[j];
      if (p == kNoSlot) continue;
      store_codes<kVals>(q + static_cast<int64_t>(p) * k + col, codes);
      if (sub == 0) {
        const int64_t e = p / max_m, r = p % max_m;
        sa[(e * kb + g) * m_pad + r] = s;
      }
    }
  }
}

// One CTA per token: out[t][c] = sum over the token's slots, ascending (= ascending expert), of
// f32(y[slot][c]) * weight, added to 0 in that order; rounded once to the output dtype.
template <typename O>
__global__ void __launch_bounds__(256) combine_kernel(const __nv_bfloat16* __restrict__ y, int64_t n, int top_k,
                                                      const uint32_t* __restrict__ pos,
                                                      const float* __restrict__ weights, O* __restrict__ out) {
  ptx::griddep_launch_dependents();
  ptx::griddep_wait();
  __shared__ uint32_t slot[kMaxTopK];
  __shared__ float wt[kMaxTopK];
  __shared__ int live;
  const int64_t t = blockIdx.x;
  if (threadIdx.x == 0) {
    int c = 0;
    for (int j = 0; j < top_k; ++j) {
      const uint32_t p = pos[t * top_k + j];
      if (p == kNoSlot) continue;
      const float w = weights[t * top_k + j];
      int i = c++;
      for (; i > 0 && slot[i - 1] > p; --i) slot[i] = slot[i - 1], wt[i] = wt[i - 1];
      slot[i] = p, wt[i] = w;
    }
    live = c;
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    float acc = 0.f;
    for (int j = 0; j < live; ++j)
      acc = __fadd_rn(acc, __fmul_rn(__bfloat162float(y[static_cast<int64_t>(slot[j]) * n + c]), wt[j]));
    if constexpr (sizeof(O) == 4) out[t * n + c] = acc;
    else out[t * n + c] = __float2bfloat16_rn(acc);
  }
}

bool misaligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) != 0; }

}  // namespace moe
}  // namespace fp8gemm

using namespace fp8gemm;

extern "C" int32_t fp8gemm_moe_route(const float* logits, int64_t m, int32_t experts, int32_t top_k,
                                     int32_t norm, int32_t first, int32_t local, int64_t max_m, uint32_t* ids,
                                     float* weights, uint32_t* pos, uint32_t* counts, void* stream) {
  if (m < 1 || m > 0x7fffffff / moe::kMaxTopK || experts < 1 || experts > 32 * moe::kMaxExpertsPerLane ||
      top_k < 1 || top_k > experts || top_k > moe::kMaxTopK || first < 0 || local < 1 ||
      first + local > experts || max_m < 1 || static_cast<int64_t>(local) * max_m > 0xfffffffeLL)
    return FP8GEMM_ERR_SHAPE;
  if (!logits || !ids || !weights || !pos || !counts) return FP8GEMM_ERR_ALIGN;
  return launch_pdl(&moe::route_kernel, dim3(1), dim3(1024), 0, static_cast<cudaStream_t>(stream), logits,
                    static_cast<int>(m), static_cast<int>(experts), static_cast<int>(top_k), static_cast<int>(norm),
                    static_cast<int>(first), static_cast<int>(local), static_cast<int>(max_m), ids, weights, pos,
                    counts);
}

extern "C" int32_t fp8gemm_moe_gather_quant(const void* x, int32_t x_dtype, int64_t m, int64_t k, int32_t top_k,
                                            const uint32_t* pos, int64_t max_m, uint8_t* q, float* sa,
                                            void* stream) {
  if (m < 1 || m > 0x7fffffff || k < 8 || k % 8 != 0 || top_k < 1 || top_k > moe::kMaxTopK || max_m < 1)
    return FP8GEMM_ERR_SHAPE;
  if (!x || !pos || !q || !sa) return FP8GEMM_ERR_ALIGN;
  if (moe::misaligned16(x) || (reinterpret_cast<uintptr_t>(q) & 7) != 0) return FP8GEMM_ERR_ALIGN;
  const bool ragged = k % 128 != 0;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const dim3 grid(static_cast<unsigned>(m)), block(128);
  if (x_dtype == FP8GEMM_BF16) {
    const auto* xb = static_cast<const __nv_bfloat16*>(x);
    return ragged ? launch_pdl(&moe::gather_quant_kernel<__nv_bfloat16, true>, grid, block, 0, s, xb, k, top_k, pos,
                               max_m, q, sa)
                  : launch_pdl(&moe::gather_quant_kernel<__nv_bfloat16, false>, grid, block, 0, s, xb, k, top_k,
                               pos, max_m, q, sa);
  }
  if (x_dtype == FP8GEMM_F32) {
    if (k % 4 != 0) return FP8GEMM_ERR_SHAPE;
    const auto* xf = static_cast<const float*>(x);
    return ragged ? launch_pdl(&moe::gather_quant_kernel<float, true>, grid, block, 0, s, xf, k, top_k, pos, max_m,
                               q, sa)
                  : launch_pdl(&moe::gather_quant_kernel<float, false>, grid, block, 0, s, xf, k, top_k, pos, max_m,
                               q, sa);
  }
  return FP8GEMM_ERR_DTYPE;
}

extern "C" int32_t fp8gemm_moe_combine(const void* y, int64_t m, int64_t n, int32_t top_k, const uint32_t* pos,
                                       const float* weights, void* out, int32_t out_dtype, void* stream) {
  if (m < 1 || m > 0x7fffffff || n < 1 || top_k < 1 || top_k > moe::kMaxTopK) return FP8GEMM_ERR_SHAPE;
  if (!y || !pos || !weights || !out) return FP8GEMM_ERR_ALIGN;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const dim3 grid(static_cast<unsigned>(m)), block(256);
  const auto* yb = static_cast<const __nv_bfloat16*>(y);
  if (out_dtype == FP8GEMM_F32)
    return launch_pdl(&moe::combine_kernel<float>, grid, block, 0, s, yb, n, top_k, pos, weights,
                      static_cast<float*>(out));
  if (out_dtype == FP8GEMM_BF16)
    return launch_pdl(&moe::combine_kernel<__nv_bfloat16>, grid, block, 0, s, yb, n, top_k, pos, weights,
                      static_cast<__nv_bfloat16*>(out));
  return FP8GEMM_ERR_DTYPE;
}
