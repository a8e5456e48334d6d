// Copy rate of GEMM-shaped operand stages: one K block per stage (two 2-D boxes, A and B, as
// the small-M GEMM loads them), two K blocks per stage as four 2-D boxes ("ring slot groups"),
// or as two 3-D boxes {128 B, rows, 2 K blocks} (one per operand). No math: a
// producer thread fills a ring, one consumer thread waits for each stage and frees it.
//
// Why: the small-M tiles run at the TMA copy rate of their stage (64x64: 320 ns per K block,
// two 8 KB boxes + scales); the copy bench (ingest_bench.cu) had a 32 KB box at 260 ns vs two 16 KB boxes 301 and four 8 KB boxes 365. Do 3-D boxes spanning two K blocks
// copy like one big box, so that a GEMM could load two K blocks per operand per box?
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I kernels/include -I dev \
//        dev/box_bench.cu -o box_bench && ./box_bench
//
// `./box_bench layouts`: one K block per stage from the same rows stored with a row
// stride of 4096 (the GEMM's K), 4224, 5120 or 8192 bytes, or "blocked" ([row / 128][K block]
// [128 rows][128 B]: every box one contiguous run) — is the strided rate (~85 GB/s per CTA for
// 2 x 16 KB, vs ~107 for contiguous boxes in ingest_bench.cu) set by the stride?
//
// Source: one K = 4096-byte-wide matrix of 4096 rows (16 MB, L2-resident after the warm-up);
// CTA c reads A rows 64c mod 4096 and B rows 64c + 2048 mod 4096 (R rows each), all 32 K blocks,
// `passes` times. Prints, per (mode, R, stages of one K block's worth, CTAs): us, ns per K block,
// GB/s per CTA.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>

#include "cuda_check.cuh"
#include "event_timer.cuh"
#include "fp8gemm/ptx/tma.cuh"

namespace ptx = fp8gemm::ptx;

constexpr int kK = 4096, kRows = 4096, kKb = kK / 128;

enum Mode : int { kOne = 0, kGroup2d = 1, kGroup3d = 2 };

// kb_per_stage K blocks per stage (1, or 2 for the group modes); a stage holds A then B, each
// [kb_per_stage][R][128].
template <int kMode>
__global__ void __launch_bounds__(128, 1)
    box_kernel(const __grid_constant__ CUtensorMap map2d, const __grid_constant__ CUtensorMap map3d, int rows,
               int stages, int passes, unsigned long long* sink, bool blocked_a, bool blocked_b) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* ring = smem_raw + ((1024u - (ptx::smem_addr(smem_raw) & 1023u)) & 1023u);
  constexpr int kPer = kMode == kOne ? 1 : 2;  // K blocks per stage
  const int op_bytes = kPer * rows * 128;      // one operand's part of a stage
  const int stage_bytes = 2 * op_bytes;
  uint64_t* full = reinterpret_cast<uint64_t*>(ring + stages * stage_bytes);
  uint64_t* empty = full + stages;
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      ptx::mbarrier_init(&full[s], 1);
      ptx::mbarrier_init(&empty[s], 1);
    }
    ptx::fence_barrier_init();
  }
  __syncthreads();
  const int row_a = (blockIdx.x * 64) % kRows, row_b = (blockIdx.x * 64 + kRows / 2) % kRows;
  const int iters = passes * kKb / kPer;
  if (threadIdx.x == 0) {
    int stage = 0;
    uint32_t phase = 0;
    for (int it = 0; it < iters; ++it) {
      ptx::mbarrier_wait(&empty[stage], phase ^ 1);
      const int kb = (it * kPer) % kKb;
      uint8_t* dst = ring + stage * stage_bytes;
      ptx::mbarrier_arrive_expect_tx(&full[stage], stage_bytes);
      if constexpr (kMode == kGroup3d) {
        ptx::tma_load_3d(dst, &map3d, &full[stage], 0, row_a, kb);
        ptx::tma_load_3d(dst + op_bytes, &map3d, &full[stage], 0, row_b, kb);
      } else {
        for (int j = 0; j < kPer; ++j) {
          // blocked: rows of 128 B, [row / 128][K block][row % 128]
          auto at = [&](int row) { return ((row / 128) * kKb + kb + j) * 128 + row % 128; };
          // (one-K-block mode: map3d is B's map, which may have another layout than A's)
          const CUtensorMap* mb = kMode == kOne ? &map3d : &map2d;
          if (blocked_a) ptx::tma_load_2d(dst + j * rows * 128, &map2d, &full[stage], 0, at(row_a));
          else ptx::tma_load_2d(dst + j * rows * 128, &map2d, &full[stage], (kb + j) * 128, row_a);
          if (blocked_b) ptx::tma_load_2d(dst + op_bytes + j * rows * 128, mb, &full[stage], 0, at(row_b));
          else ptx::tma_load_2d(dst + op_bytes + j * rows * 128, mb, &full[stage], (kb + j) * 128, row_b);
        }
      }
      if (++stage == stages) {
        stage = 0;
        phase ^= 1;
      }
    }
  } else if (threadIdx.x == 32) {
    int stage = 0;
    uint32_t phase = 0;
    unsigned long long acc = 0;
    for (int it = 0; it < iters; ++it) {
      ptx::mbarrier_wait(&full[stage], phase);
      acc += ring[stage * stage_bytes + (it & 127)];  // touch the data
      ptx::mbarrier_arrive(&empty[stage]);
      if (++stage == stages) {
        stage = 0;
        phase ^= 1;
      }
    }
    if (acc == 0x5eed5eedULL) sink[blockIdx.x] = acc;  // never true; keeps the reads
  }
}

static PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
}

// rank 2: {128-byte K chunk, rows}; rank 3: {128 bytes, rows, K blocks} (the K-block stride is
// 128 bytes: the box lands as [2][rows][128], two 128B-swizzled K-block tiles back to back).
// row_stride: bytes between rows (>= kK); 0: the blocked layout (rows of 128 B, back to back).
static CUtensorMap make_map(const void* base, int rank, uint32_t box_rows, bool* ok, int row_stride = kK,
                            CUtensorMapL2promotion promo = CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
  CUtensorMap map{};
  const cuuint64_t dims[3] = {rank == 2 ? cuuint64_t(row_stride ? kK : 128) : 128,
                              cuuint64_t(row_stride ? kRows : kRows * kKb), kKb};
  const cuuint64_t strides[2] = {cuuint64_t(row_stride ? row_stride : 128), 128};
  const cuuint32_t box[3] = {128, box_rows, 2};
  const cuuint32_t estr[3] = {1, 1, 1};
  const CUresult r = encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, rank, const_cast<void*>(base), dims, strides, box,
                               estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, promo,
                               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  *ok = r == CUDA_SUCCESS;
  if (!*ok) std::printf("cuTensorMapEncodeTiled rank %d box rows %u failed: %d\n", rank, box_rows, int(r));
  return map;
}

template <int kMode>
// row_stride / b_stride: A's / B's layout (0 = blocked); promo: both maps' L2 promotion.
static float run(const uint8_t* src, int rows, int stages, int ctas, int passes, unsigned long long* sink,
                 int row_stride = kK, int b_stride = kK,
                 CUtensorMapL2promotion promo = CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
  bool ok2 = true, ok3 = true;
  const CUtensorMap m2 = make_map(src, 2, rows, &ok2, row_stride, promo),
                    m3 = kMode == kGroup3d ? make_map(src, 3, rows, &ok3) : make_map(src, 2, rows, &ok3, b_stride, promo);
  if (!ok2 || !ok3) return -1.f;
  const int per = kMode == kOne ? 1 : 2;
  const int smem = stages * 2 * per * rows * 128 + 2 * stages * 8 + 1024;
  CHECK(cudaFuncSetAttribute(box_kernel<kMode>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  return best_launch_us([&] { box_kernel<kMode><<<ctas, 128, smem>>>(m2, m3, rows, stages, passes, sink, row_stride == 0, b_stride == 0); },
                        [](int) {});
}

int main(int argc, char** argv) {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  uint8_t* src;
  unsigned long long* sink;
  CHECK(cudaMalloc(&src, size_t(8192) * kRows));  // room for the widest row stride
  CHECK(cudaMalloc(&sink, 4096 * sizeof(unsigned long long)));
  CHECK(cudaMemset(src, 1, size_t(8192) * kRows));
  const char* names[] = {"one_kb_2boxes", "two_kb_4boxes", "two_kb_2boxes_3d"};
  const int passes = 8;
  // " us ns_per_kb GBps_per_cta" of a run that copied rows x 128 B of A and of B per K block.
  auto rates = [&](float us, int rows) {
    const double kbs = double(passes) * kKb, bytes = kbs * 2 * rows * 128;
    std::printf(" %.2f %.1f %.2f\n", us, us * 1e3 / kbs, bytes / us * 1e-3);
  };
  if (argc > 1 && std::string(argv[1]) == "layouts") {
    std::printf("LAYOUT row_stride(0=blocked) rows stages ctas us ns_per_kb GBps_per_cta\n");
    for (int rows : {64, 128})
      for (int ctas : {128, sms})
        for (int stride : {4096, 4224, 5120, 8192, 0}) {
          const int stages = rows == 64 ? 8 : 5;
          const float us = run<kOne>(src, rows, stages, ctas, passes, sink, stride, stride);
          std::printf("LAYOUT %d %d %d %d", stride, rows, stages, ctas);
          rates(us, rows);
        }
    // A and B in different layouts, and the tensor maps' L2 promotion (the GEMM uses 256B).
    std::printf("MIXED a_stride b_stride promo rows stages ctas us ns_per_kb GBps_per_cta\n");
    const CUtensorMapL2promotion promos[] = {CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
                                             CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B};
    const int promo_bytes[] = {0, 64, 128, 256};
    for (int rows : {64, 128})
      for (int ab : {0, 1, 2, 3})  // A/B strided-strided, strided-blocked, blocked-strided, blocked-blocked
        for (int pi = 0; pi < 4; ++pi) {
          const int sa = ab & 2 ? 0 : kK, sb = ab & 1 ? 0 : kK;
          const int stages = rows == 64 ? 8 : 5;
          const float us = run<kOne>(src, rows, stages, 128, passes, sink, sa, sb, promos[pi]);
          std::printf("MIXED %d %d %d %d %d %d", sa, sb, promo_bytes[pi], rows, stages, 128);
          rates(us, rows);
        }
    return 0;
  }
  std::printf("BOX mode rows kb_in_ring ctas us ns_per_kb GBps_per_cta\n");
  for (int rows : {64, 128})
    for (int kb_ring : {4, 8})  // K blocks the ring holds (stages x K blocks per stage)
      for (int ctas : {128, sms})
        for (int mode = 0; mode < 3; ++mode) {
          const int per = mode == kOne ? 1 : 2, stages = kb_ring / per;
          if (stages * 2 * per * rows * 128 > 200 * 1024) continue;
          float us = 0;
          if (mode == kOne) us = run<kOne>(src, rows, stages, ctas, passes, sink);
          if (mode == kGroup2d) us = run<kGroup2d>(src, rows, stages, ctas, passes, sink);
          if (mode == kGroup3d) us = run<kGroup3d>(src, rows, stages, ctas, passes, sink);
          std::printf("BOX %s %d %d %d", names[mode], rows, kb_ring, ctas);
          rates(us, rows);
        }
  return 0;
}
