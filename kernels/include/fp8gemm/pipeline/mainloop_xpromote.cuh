// One tile's K loop for a math warpgroup with the promotion overlapped across K blocks
// (schedules with kXPromote: tokens on the wgmma M side, one m64 wave, one weight-scale block
// per tile). K block i+1's four wgmma run on the tensor cores, in a second block accumulator,
// while K block i is scaled into the f32 accumulator on the CUDA cores:
//
//   issue(0 -> A); [issue(i+1 -> B); wait<1>; release i; promote A; issue(i+2 -> A); ...]
//
// Without it the two math warpgroups wait on the same stage and promote at the same time, so
// the tensor cores idle for the promotion (the per-stage probe: warp-specialized 128x128 took
// 608 ns per K block, MMA 288 + promotion 160). The loop is unrolled by two so each block
// accumulator keeps a fixed role: no register copy ever touches an in-flight wgmma (a runtime-
// indexed double buffer made ptxas serialize every wgmma, C7514). Costs kAcc more registers.
#pragma once
#include <cstdint>

#include "fp8gemm/pipeline/kblock_mma.cuh"
#include "fp8gemm/pipeline/ring.cuh"
#include "fp8gemm/ptx/mbarrier.cuh"
#include "fp8gemm/ptx/wgmma.cuh"
#include "fp8gemm/common/trace.cuh"

namespace fp8gemm {

// acc: the warpgroup's f32 accumulator (kAcc = TN / 2 values per thread). a_row_off: byte
// offset of this warpgroup's 64 rows inside a stage's A tile. row: the thread's first fragment
// row in the tile (scales of row and row + 8). sw_tile: the tile's weight scale per K block.
// probe: this thread stamps the per-stage probe (FP8GEMM_TRACE_STAGES). t_first: where thread 0
// stamps the first K block's arrival in a -DFP8GEMM_TRACE build (common/trace.cuh), or nullptr.
template <int TN, class Ring, class State>
__device__ __forceinline__ void consume_tile_xpromote(const Ring& ring, State& st, const float* sw_tile,
                                                      int nkb, float* acc, uint32_t a_row_off, int row,
                                                      bool probe,
                                                      unsigned long long* t_first) {
  using MMA = ptx::WgmmaE4M3<TN>;
  constexpr int kAcc = MMA::kAcc;
  const int lane = threadIdx.x % 32;
  float blk_a[kAcc], blk_b[kAcc];  // the two block accumulators
  float fa[2], fb[2];              // their K blocks' row scales x weight scale
  int stage_a = 0, stage_b = 0;    // their ring stages (released after the wait)
  (void)probe;
  (void)t_first;

  // Wait for K block i's stage, read its scales, issue its wgmma into d.
  auto issue = [&](float* d, float* f, int& stage, int i) {
    FP8GEMM_STAGE_MARK(cons, i, 0, probe);
    ptx::mbarrier_wait(ring.full(st.stage), st.phase);
    FP8GEMM_STAGE_MARK(cons, i, 1, probe);
#ifdef FP8GEMM_TRACE
    if (i == 0 && threadIdx.x == 0 && t_first != nullptr) *t_first = ptx::globaltimer_ns();
#endif
    const float* sa_s = ring.scales(st.stage);
    const float sc = sw_tile[i];
    f[0] = sa_s[row] * sc;
    f[1] = sa_s[row + 8] * sc;
    const uint64_t da = ptx::make_smem_desc_k128_sw128(ptx::smem_addr(ring.a(st.stage)) + a_row_off);
    const uint64_t db = ptx::make_smem_desc_k128_sw128(ptx::smem_addr(ring.b(st.stage)));
    issue_kblock_mma<MMA>(da, db, d);
    stage = st.stage;
    st.advance();
  };
  // K block i's wgmma are done (the caller waited): free its stage, promote d.
  auto finish = [&](float* d, const float* f, int stage, int i) {
    FP8GEMM_STAGE_MARK(cons, i, 2, probe);
    release_stage(ring, stage, lane);
#pragma unroll
    for (int x = 0; x < kAcc; ++x) ptx::fence_operand(d[x]);
#pragma unroll
    for (int x = 0; x < kAcc; x += 4) {
      acc[x] += d[x] * f[0];
      acc[x + 1] += d[x + 1] * f[0];
      acc[x + 2] += d[x + 2] * f[1];
      acc[x + 3] += d[x + 3] * f[1];
    }
    FP8GEMM_STAGE_MARK(cons, i, 3, probe);
  };

  if (nkb <= 0) return;  // an empty K split: the accumulator stays zero
  issue(blk_a, fa, stage_a, 0);
  int i = 0;
  for (; i + 2 < nkb; i += 2) {  // K blocks i (in A) and i + 1 (into B) both have a successor
    issue(blk_b, fb, stage_b, i + 1);
    ptx::wgmma_wait<1>();
    finish(blk_a, fa, stage_a, i);
    issue(blk_a, fa, stage_a, i + 2);
    ptx::wgmma_wait<1>();
    finish(blk_b, fb, stage_b, i + 1);
  }
  if (i + 1 < nkb) {  // two K blocks left
    issue(blk_b, fb, stage_b, i + 1);
    ptx::wgmma_wait<1>();
    finish(blk_a, fa, stage_a, i);
    ptx::wgmma_wait<0>();
    finish(blk_b, fb, stage_b, i + 1);
  } else {
    ptx::wgmma_wait<0>();
    finish(blk_a, fa, stage_a, i);
  }
}

}  // namespace fp8gemm
