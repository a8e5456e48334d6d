// Grouped (mixture-of-experts) tile scheduler: the tiles of one expert's weight rows and its
// tokens, either swap-AB (weight rows on the wgmma M side, tokens on N: decode sizes) or tokens
// on M (weight rows on N: prefill sizes; kTokensOnM).
//
// The experts' weights are one stacked [E * n, K] operand (n % 128 == 0, so expert e's row r is
// global row e * n + r and its scale row (e * n + r) / 128: the kernel body's weight loads and
// promotion are the dense ones). The tokens are one [rows, K] operand:
//   masked     (max_m > 0): expert e's tokens are rows e * max_m .. e * max_m + counts[e]
//                           (counts clamped to max_m);
//   contiguous (max_m = 0): expert e's tokens follow expert e - 1's (offsets = prefix sums of
//                           the counts, clamped to the rows).
// A unit is (expert, weight tile, token tile); an expert has n / WT x ceil(count / TT) units
// (WT, TT: the weight and token sides of the tile; none when its count is 0), tokens fastest so
// that the CTAs sharing a weight tile run together. A token tile never crosses into the next
// expert's tokens (the tiles are cut at each expert's count). The grid is persistent: CTA b takes units b, b + grid, ... and walks the experts
// once, in order. The counts come from the previous kernel (PDL): the first next() waits for
// it (griddepcontrol.wait) before reading them.
#pragma once
#include <cuda_bf16.h>
#include <cstdint>

#include "fp8gemm/ptx/tma.cuh"
#include "fp8gemm/scheduler/tile_scheduler.cuh"

namespace fp8gemm {

// The experts' layout of a grouped launch (GemmParams::group).
struct GroupedLayout {
  const uint32_t* counts;  // [groups] tokens per expert, device memory written by the previous kernel
  int groups;              // experts
  int max_m;               // masked: token rows per expert; 0: contiguous
};

// A token count as the kernel uses it: masked, clamped to max_m; contiguous, to the rows left.
__device__ __forceinline__ int grouped_count(const GroupedLayout& g, int e, int base, int rows) {
  const uint32_t c = g.counts[e];
  const int cap = g.max_m > 0 ? g.max_m : rows - base;
  return c > static_cast<uint32_t>(cap) ? cap : static_cast<int>(c);
}

template <int TM, int TN, bool kTokensOnM = false>
struct GroupedScheduler {
  static constexpr int WT = kTokensOnM ? TN : TM;  // weight rows per tile
  static constexpr int TT = kTokensOnM ? TM : TN;  // tokens per tile
  TileShape s;      // kb_total
  GroupedLayout g;
  int rows;         // token rows of the operand (masked: groups * max_m)
  int n;            // output features per expert
  int next_id;      // the next unit this CTA takes
  int e = -1;       // current expert (-1: counts not read yet)
  int unit0 = 0;    // first unit of expert e
  int units = 0;    // units of expert e
  int base = 0;     // first token row of expert e
  int count = 0;    // tokens of expert e
  __device__ __forceinline__ GroupedScheduler(const TileShape& shape, const GroupedLayout& layout,
                                              int m, int n_per_expert)
      : s(shape), g(layout), rows(m), n(n_per_expert), next_id(blockIdx.x) {}

  __device__ __forceinline__ bool next(Tile& t) {
    if (e < 0) {
      ptx::griddep_wait();  // the counts are the previous kernel's output
      e = 0;
      count = grouped_count(g, 0, 0, rows);
      units = (n / WT) * ((count + TT - 1) / TT);
    }
    const int id = next_id;
    // Walk to the expert holding unit `id`. The counts of the next kChunk experts are loaded
    // together (independent loads): one memory latency per kChunk experts, not one per expert
    // (a CTA whose first unit lies past 128 mostly empty experts would wait ~3 us otherwise).
    constexpr int kChunk = 8;
    while (id >= unit0 + units) {
      if (e + 1 >= g.groups) return false;
      uint32_t c[kChunk];
#pragma unroll
      for (int j = 0; j < kChunk; ++j) c[j] = e + 1 + j < g.groups ? g.counts[e + 1 + j] : 0u;
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        if (id < unit0 + units || e + 1 >= g.groups) break;
        unit0 += units;
        base += g.max_m > 0 ? g.max_m : count;
        ++e;
        const int cap = g.max_m > 0 ? g.max_m : rows - base;
        count = c[j] > static_cast<uint32_t>(cap) ? cap : static_cast<int>(c[j]);
        units = (n / WT) * ((count + TT - 1) / TT);
      }
    }
    next_id += gridDim.x;
    const int tok_tiles = (count + TT - 1) / TT;
    const int local = id - unit0;
    const int wt = local / tok_tiles, tt = local - wt * tok_tiles;
    const int w0 = e * n + wt * WT, t0 = base + tt * TT;
    t.row0 = kTokensOnM ? t0 : w0;
    t.col0 = kTokensOnM ? w0 : t0;
    t.kb0 = 0;
    t.kb1 = s.kb_total;
    t.split = 0;
    t.tail = -1;
    t.expert = e;
    t.tok_end = base + count;
    return true;
  }
};

// The output rows no tile writes are zeros: masked, rows [counts[e], max_m) of every expert;
// contiguous, the rows past the counts' sum. y is [rows, n] bf16 (n % 8 == 0), written in
// 16-byte chunks by `nthreads` threads (this one: `tid`). Call after griddepcontrol.wait.
__device__ __forceinline__ void grouped_zero_fill(const GroupedLayout& g, int rows, int n,
                                                  __nv_bfloat16* __restrict__ y, int64_t tid,
                                                  int64_t nthreads) {
  const int64_t chunks_per_row = n / 8;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  // The spans, concatenated, are dealt out round-robin: chunk j of the concatenation goes to
  // thread j % nthreads, so every thread gets its share whatever the spans' lengths.
  int64_t done = 0;  // chunks in the spans before this one
  auto fill = [&](int r0, int r1) {  // rows [r0, r1)
    const int64_t c0 = static_cast<int64_t>(r0) * chunks_per_row, c1 = static_cast<int64_t>(r1) * chunks_per_row;
    const int64_t first = ((tid - done) % nthreads + nthreads) % nthreads;
    for (int64_t c = c0 + first; c < c1; c += nthreads) reinterpret_cast<uint4*>(y)[c] = zero;
    done += c1 - c0;
  };
  int base = 0;
  for (int e = 0; e < g.groups; ++e) {
    const int count = grouped_count(g, e, base, rows);
    if (g.max_m > 0) {
      if (count < g.max_m) fill(base + count, base + g.max_m);
      base += g.max_m;
    } else {
      base += count;
    }
  }
  if (g.max_m == 0 && base < rows) fill(base, rows);
}

}  // namespace fp8gemm
