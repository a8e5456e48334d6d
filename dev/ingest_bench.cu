// How fast can one SM fill its shared memory from L2 (and HBM)? TMA boxes, cp.async, or both.
//
// Why: a mid-M GEMM's main loop ingests A + B at ~67-79 GB/s per SM
// whatever its ring depth (8, 12, 16 stages) and CTA count (64 or 128). Is that the TMA path's
// per-SM limit, the L2 -> SM port, or something of our kernel's? This measures the copy alone:
// a producer warpgroup fills a ring of `stages` buffers of `rows` x 128 B, one consumer thread
// waits for each stage and frees it (no math), and the kernel time gives bytes per second.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I kernels/include -I dev \
//        dev/ingest_bench.cu -o ingest_bench && ./ingest_bench
//
// (from the repo root); `./ingest_bench 2` or `3` prints table 2
// or 3 instead (below). Prints one row per (mode, box rows,
// stages, CTAs, hot|cold): microseconds, GB/s in total and per CTA. Modes: tma (one thread
// issues 2-D boxes with the 128-byte swizzle, like the GEMM's operands), cpasync (128 threads,
// 16 bytes each, completion through cp.async.mbarrier.arrive), both (half of each stage each),
// tma_mc2 (2-CTA clusters reading the same rows: each CTA loads half of every stage and
// multicasts it to both, so each SM issues half the requests for the same bytes received —
// tells a request-side limit from a receive-side one).
// hot: a 16 MB source read over and over (L2-resident); cold: 1 GB, each CTA its own region,
// L2 flushed before the launch.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "fp8gemm/ptx/tma.cuh"

namespace ptx = fp8gemm::ptx;

// The multicast and remote-arrive wrappers of the tma_mc2 mode (the GEMM kernels have no
// multicast: they are here, not in kernels/include/fp8gemm/ptx/).
namespace bench_ptx {
// 2-D tile load multicast to every CTA of the cluster in `cta_mask`; each destination CTA's
// mbarrier at the same shared-memory offset receives the byte count.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const CUtensorMap* map, uint64_t* bar,
                                                      int32_t c0, int32_t c1, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(
          ptx::smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(ptx::smem_addr(bar)), "r"(c0), "r"(c1), "h"(cta_mask)
      : "memory");
}
// Arrive on the mbarrier at the same shared-memory offset in CTA `cta_rank` of the cluster.
__device__ __forceinline__ void mbarrier_arrive_cluster(uint64_t* bar, uint32_t cta_rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(ptx::smem_addr(bar)), "r"(cta_rank));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}
}  // namespace bench_ptx

constexpr int kRowBytes = 128;
constexpr int kProducers = 128;

__device__ __forceinline__ void cp_async_16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(ptx::smem_addr(dst)), "l"(src) : "memory");
}

// The barrier counts one arrival of this thread once its earlier cp.async copies have landed.
__device__ __forceinline__ void cp_async_arrive_noinc(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(ptx::smem_addr(bar)) : "memory");
}

enum Mode : int { kTma = 0, kCpAsync = 1, kBoth = 2, kTmaMc2 = 3, kTma3d = 4 };

// Waits: kTryWait = mbarrier.try_wait loop (may suspend the thread until the phase completes,
// as the GEMM's waits do); kTestWait = mbarrier.test_wait loop (never suspends: pure polling).
enum Wait : int { kTryWait = 0, kTestWait = 1 };

__device__ __forceinline__ bool test_wait(uint64_t* bar, uint32_t parity) {
  uint32_t ok;
  asm volatile(
      "{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
      : "=r"(ok)
      : "r"(ptx::smem_addr(bar)), "r"(parity)
      : "memory");
  return ok != 0;
}

template <int kWait>
__device__ __forceinline__ void wait_phase(uint64_t* bar, uint32_t parity) {
  if constexpr (kWait == kTestWait) {
    while (!test_wait(bar, parity)) {
    }
  } else {
    ptx::mbarrier_wait(bar, parity);
  }
}

// kBoxes: TMA boxes per stage (rows / kBoxes rows each, one barrier): per-op vs per-stage cost.
template <int kMode, int kWait = kTryWait, int kBoxes = 1>
__global__ void __launch_bounds__(256, 1)
    ingest_kernel(const __grid_constant__ CUtensorMap map, const uint8_t* __restrict__ src,
                  int64_t src_rows, int rows, int stages, int iters, unsigned long long* sink) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* ring = smem_raw + ((1024u - (ptx::smem_addr(smem_raw) & 1023u)) & 1023u);
  const int stage_bytes = rows * kRowBytes;
  uint64_t* full = reinterpret_cast<uint64_t*>(ring + stages * stage_bytes);
  uint64_t* empty = full + stages;
  const int tid = threadIdx.x;
  // TMA part of a stage (rows), cp.async part (rows), per mode.
  const int tma_rows = kMode == kTma || kMode == kTmaMc2 || kMode == kTma3d ? rows : kMode == kBoth ? rows / 2 : 0;
  const int cp_rows = rows - tma_rows;
  constexpr bool kMc = kMode == kTmaMc2;
  const uint32_t rank = kMc ? ptx::cluster_ctarank() : 0;
  if (tid == 0) {
    for (int s = 0; s < stages; ++s) {
      ptx::mbarrier_init(&full[s], (tma_rows > 0 ? 1 : 0) + (cp_rows > 0 ? kProducers : 0));
      ptx::mbarrier_init(&empty[s], kMc ? 2 : 1);  // multicast: both CTAs' consumers free a stage
    }
    ptx::fence_barrier_init();
  }
  __syncthreads();
  if constexpr (kMc) ptx::cluster_sync();  // the peer's barriers are initialised
  // Multicast: the two CTAs of a cluster read the same rows.
  const int64_t row0 = static_cast<int64_t>(kMc ? blockIdx.x / 2 : blockIdx.x) * iters * rows;
  if (tid < kProducers) {
    int stage = 0;
    uint32_t phase = 0;
    for (int it = 0; it < iters; ++it) {
      wait_phase<kWait>(&empty[stage], phase ^ 1);
      const int64_t r = (row0 + static_cast<int64_t>(it) * rows) % src_rows;
      uint8_t* dst = ring + stage * stage_bytes;
      if (tma_rows > 0 && tid == 0) {
        ptx::mbarrier_arrive_expect_tx(&full[stage], tma_rows * kRowBytes);
        if constexpr (kMc) {  // my half of the stage, into both CTAs (the box is rows / 2)
          const int half = rows / 2;
          bench_ptx::tma_load_2d_multicast(dst + rank * half * kRowBytes, &map, &full[stage], 0,
                                     static_cast<int32_t>(r + rank * half), 0x3);
        } else if constexpr (kMode == kTma3d) {
          // One 3-D box: two 128-byte K blocks of rows / 2 rows each (make_u8_map_kpair).
          ptx::tma_load_3d(dst, &map, &full[stage], 0, static_cast<int32_t>(r / 2), 0);
        } else {
          const int box = tma_rows / kBoxes;
#pragma unroll
          for (int b = 0; b < kBoxes; ++b)
            ptx::tma_load_2d(dst + b * box * kRowBytes, &map, &full[stage], 0, static_cast<int32_t>(r + b * box));
        }
      }
      if (cp_rows > 0) {
        const uint8_t* g = src + (r + tma_rows) * kRowBytes;
        uint8_t* d = dst + tma_rows * kRowBytes;
        for (int c = tid; c < cp_rows * (kRowBytes / 16); c += kProducers) cp_async_16(d + 16 * c, g + 16 * c);
        cp_async_arrive_noinc(&full[stage]);
      }
      if (++stage == stages) {
        stage = 0;
        phase ^= 1;
      }
    }
  } else if (tid == kProducers) {
    int stage = 0;
    uint32_t phase = 0;
    unsigned long long acc = 0;
    for (int it = 0; it < iters; ++it) {
      wait_phase<kWait>(&full[stage], phase);
      acc += ring[stage * stage_bytes + (it & 127)];  // touch the data
      ptx::mbarrier_arrive(&empty[stage]);
      if constexpr (kMc) bench_ptx::mbarrier_arrive_cluster(&empty[stage], rank ^ 1);
      if (++stage == stages) {
        stage = 0;
        phase ^= 1;
      }
    }
    if (acc == 0x5eed5eedULL) sink[blockIdx.x] = acc;  // never true; keeps the reads
  }
  if constexpr (kMc) ptx::cluster_sync();  // no CTA leaves while its peer may still write to it
}

#include "event_timer.cuh"
#include "tmap_u8.cuh"

static CUtensorMap make_map(const void* base, uint64_t rows, uint32_t box_rows) {
  return make_u8_map(base, kRowBytes, rows, kRowBytes, box_rows);
}

template <int kMode, int kWait = kTryWait, int kBoxes = 1>
static float run(const uint8_t* src, int64_t src_rows, int rows, int stages, int ctas, int iters,
                 unsigned long long* sink, uint8_t* flush, size_t flush_bytes, bool cold) {
  const int box_rows = kMode == kTma ? rows / kBoxes : kMode == kBoth || kMode == kTmaMc2 ? rows / 2 : 1;
  const CUtensorMap map = kMode == kTma3d ? make_u8_map_kpair(src, src_rows / 2, rows / 2) : make_map(src, src_rows, box_rows);
  const int smem = stages * rows * kRowBytes + 2 * stages * 8 + 1024;
  CHECK(cudaFuncSetAttribute(ingest_kernel<kMode, kWait, kBoxes>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaLaunchConfig_t lc = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = kMode == kTmaMc2 ? 2 : 1;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  lc.gridDim = dim3(ctas);
  lc.blockDim = dim3(256);
  lc.dynamicSmemBytes = smem;
  lc.attrs = attr;
  lc.numAttrs = 1;
  return best_launch_us(
      [&] { CHECK(cudaLaunchKernelEx(&lc, ingest_kernel<kMode, kWait, kBoxes>, map, src, src_rows, rows, stages, iters, sink)); },
      [&](int rep) {
        if (cold) CHECK(cudaMemsetAsync(flush, rep, flush_bytes));
      });
}

// Table 2: is the ~200 ns per stage of the first table a per-stage cost, a
// per-TMA-op cost, or bytes? Stage sizes up to 32 KB, 1/2/4 boxes per stage, try_wait vs
// test_wait (polling) on both sides. Measured: ~200 ns per stage +
// ~35 ns per extra box + ~2 ns per KB; polling is slower.
template <int kWait, int kBoxes>
static void table2(const uint8_t* hot, const uint8_t* cold, size_t hot_bytes, size_t cold_bytes, unsigned long long* sink,
                   uint8_t* flush, size_t flush_bytes, int sms) {
  for (int rows : {64, 128, 256})
    for (int stages : {2, 4, 6})
      for (int ctas : {2, sms})
        for (int c = 0; c < 2; ++c) {
          if (stages * rows * kRowBytes > 200 * 1024 || rows / kBoxes > 256) continue;
          const bool is_cold = c == 1;
          const size_t per_cta = size_t(4) << 20;
          const int iters = static_cast<int>(per_cta / (rows * kRowBytes));
          const float us = run<kTma, kWait, kBoxes>(is_cold ? cold : hot,
                                                    static_cast<int64_t>((is_cold ? cold_bytes : hot_bytes) / kRowBytes),
                                                    rows, stages, ctas, iters, sink, flush, flush_bytes, is_cold);
          std::printf("INGEST2 %s %d %d %d %d %s %.2f %.1f %.2f\n", kWait == kTestWait ? "test_wait" : "try_wait", kBoxes,
                      rows, stages, ctas, is_cold ? "cold" : "hot", us, us * 1e3 / iters, double(per_cta) / us * 1e-3);
        }
}

// Table 3: is the ~200 ns per stage a per-SM limit (the TMA unit) or the latency
// of one ring's hand-off chain? Independent rings on one SM: 1, 2 or 3 CTAs per SM (each its
// own ring; shared memory <= 1/n of the SM's), hot and cold. GB/s per SM = per CTA x CTAs / SMs.
// And at one CTA per SM a stage as one 3-D box of two 128-byte K blocks (rows / 2 rows each, as
// a GEMM stage of two K blocks would be) against one 2-D box of the same bytes.
// `only` (box3d, rows, stages, per_sm; -1 = all): one row per process, so that a launch that
// never finishes costs only its own row under `timeout`.
static void table3(const uint8_t* hot, const uint8_t* cold, size_t hot_bytes, size_t cold_bytes, unsigned long long* sink,
                   uint8_t* flush, size_t flush_bytes, int sms, const int only[4]) {
  auto want = [&](int i, int v) { return only[i] < 0 || only[i] == v; };
  for (int box3d = 0; box3d < 2; ++box3d)
    for (int rows : {64, 128, 192, 256, 512})
      for (int stages : {2, 4, 8})
        for (int per_sm : {1, 2, 3})
          for (int c = 0; c < 2; ++c) {
            if (!want(0, box3d) || !want(1, rows) || !want(2, stages) || !want(3, per_sm)) continue;
            const int ring_bytes = stages * rows * kRowBytes;
            if (ring_bytes > 200 * 1024 || ring_bytes * per_sm > 220 * 1024) continue;
            if (box3d ? (per_sm != 1 || rows < 128) : rows > 256) continue;  // a 2-D box: <= 256 rows
            const bool is_cold = c == 1;
            const int ctas = sms * per_sm;
            const size_t per_cta = size_t(2) << 20;
            const int iters = static_cast<int>(per_cta / (rows * kRowBytes));
            const int64_t src_rows = static_cast<int64_t>((is_cold ? cold_bytes : hot_bytes) / kRowBytes);
            const uint8_t* src = is_cold ? cold : hot;
            const float us =
                box3d ? run<kTma3d>(src, src_rows, rows, stages, ctas, iters, sink, flush, flush_bytes, is_cold)
                      : run<kTma>(src, src_rows, rows, stages, ctas, iters, sink, flush, flush_bytes, is_cold);
            const double per_cta_gbs = double(per_cta) / us * 1e-3;
            std::printf("INGEST3 %s %d %d %d %s %.2f %.2f %.1f\n", box3d ? "3d" : "2d", rows * kRowBytes / 1024, stages,
                        per_sm, is_cold ? "cold" : "hot", us, per_cta_gbs, per_cta_gbs * per_sm);
            std::fflush(stdout);
          }
}

int main(int argc, char** argv) {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t hot_bytes = size_t(16) << 20, cold_bytes = size_t(1) << 30, flush_bytes = size_t(256) << 20;
  uint8_t *hot, *cold, *flush;
  unsigned long long* sink;
  CHECK(cudaMalloc(&hot, hot_bytes));
  CHECK(cudaMalloc(&cold, cold_bytes));
  CHECK(cudaMalloc(&flush, flush_bytes));
  CHECK(cudaMalloc(&sink, 4096 * sizeof(unsigned long long)));
  CHECK(cudaMemset(hot, 1, hot_bytes));
  CHECK(cudaMemset(cold, 1, cold_bytes));
  if (argc > 1 && argv[1][0] == '3') {
    std::printf("INGEST3 box stage_KB stages ctas_per_sm temp us GBps_per_cta GBps_per_sm\n");
    int only[4] = {-1, -1, -1, -1};  // `3 BOX3D ROWS STAGES PER_SM`: that row only
    for (int i = 0; i < 4 && i + 2 < argc; ++i) only[i] = std::atoi(argv[i + 2]);
    table3(hot, cold, hot_bytes, cold_bytes, sink, flush, flush_bytes, sms, only);
    return 0;
  }
  if (argc > 1 && argv[1][0] == '2') {
    std::printf("INGEST2 wait boxes rows stages ctas temp us ns_per_stage GBps_per_cta\n");
    table2<kTryWait, 1>(hot, cold, hot_bytes, cold_bytes, sink, flush, flush_bytes, sms);
    table2<kTestWait, 1>(hot, cold, hot_bytes, cold_bytes, sink, flush, flush_bytes, sms);
    table2<kTryWait, 2>(hot, cold, hot_bytes, cold_bytes, sink, flush, flush_bytes, sms);
    table2<kTryWait, 4>(hot, cold, hot_bytes, cold_bytes, sink, flush, flush_bytes, sms);
    table2<kTestWait, 4>(hot, cold, hot_bytes, cold_bytes, sink, flush, flush_bytes, sms);
    return 0;
  }
  const char* names[] = {"tma", "cpasync", "both", "tma_mc2"};
  std::printf("INGEST mode rows stages ctas temp us GBps_total GBps_per_cta\n");
  for (int mode = 0; mode < 4; ++mode)
    for (int rows : {32, 64, 128})
      for (int stages : {2, 4, 8, 16})
        for (int ctas : {2, sms / 2, sms})
          for (int c = 0; c < 2; ++c) {
            if (stages * rows * kRowBytes > 200 * 1024) continue;
            const bool is_cold = c == 1;
            const size_t per_cta = size_t(4) << 20;  // bytes each CTA copies
            const int iters = static_cast<int>(per_cta / (rows * kRowBytes));
            const uint8_t* src = is_cold ? cold : hot;
            const int64_t src_rows = static_cast<int64_t>((is_cold ? cold_bytes : hot_bytes) / kRowBytes);
            float us = 0;
            if (mode == kTma) us = run<kTma>(src, src_rows, rows, stages, ctas, iters, sink, flush, flush_bytes, is_cold);
            if (mode == kCpAsync) us = run<kCpAsync>(src, src_rows, rows, stages, ctas, iters, sink, flush, flush_bytes, is_cold);
            if (mode == kBoth) us = run<kBoth>(src, src_rows, rows, stages, ctas, iters, sink, flush, flush_bytes, is_cold);
            if (mode == kTmaMc2) us = run<kTmaMc2>(src, src_rows, rows, stages, ctas, iters, sink, flush, flush_bytes, is_cold);
            const double bytes = double(per_cta) * ctas;
            std::printf("INGEST %s %d %d %d %s %.2f %.1f %.2f\n", names[mode], rows, stages, ctas,
                        is_cold ? "cold" : "hot", us, bytes / us * 1e-3, bytes / ctas / us * 1e-3);
          }
  return 0;
}
