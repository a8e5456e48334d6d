// Development timeline trace of every launch (nvcc -DFP8GEMM_TRACE, e.g.
// the cargo feature `trace`; kernels/trace/trace.cu dumps the rings, dev/trace_timeline.py reads
// the dump).
//
// Why: CUPTI gives a kernel's first start and last end; a decode step's ~29 µs per layer of
// small-kernel time and the GEMMs' ramps and tails need each CTA's phases. Thread 0 of every
// traced CTA appends one 32-byte record to a ring in global memory: %globaltimer at entry and
// the nanoseconds from entry to up to three marks (0 = not reached) and to its end. Marks are
// per kernel kind (commented where each kernel begins its trace). The ring slot is taken by an atomic issued at entry whose
// result is only read at the end, so a CTA does not wait for it.
//
// Without FP8GEMM_TRACE every macro is empty and nothing is allocated.
#pragma once
#include <cstdint>

// Kernel kinds (the record's tag).
#define FP8GEMM_TRACE_GEMM 1
#define FP8GEMM_TRACE_NORM_SPLIT 2
#define FP8GEMM_TRACE_NORM 3
#define FP8GEMM_TRACE_SWIGLU 4
#define FP8GEMM_TRACE_ATTENTION 5
#define FP8GEMM_TRACE_COMBINE 6
#define FP8GEMM_TRACE_ARGMAX 7
#define FP8GEMM_TRACE_QUANT 8
#define FP8GEMM_TRACE_REDUCE 9
// One record per tile of a persistent schedule (after its CTA's own record, tag GEMM): t0 =
// the tile's start, marks = first K block landed, last K block done, fix-up done (split tail /
// stream-K pieces; 0 for a whole tile), end = stored or published. cta = block index | K blocks
// << 16 | role << 24 (0 whole tile, 1 published a piece, 2 finished a tile from pieces).
#define FP8GEMM_TRACE_TILE 10

#if defined(FP8GEMM_TRACE) || defined(FP8GEMM_TRACE_STAGES)
#include "fp8gemm/ptx/timer.cuh"  // the timeline trace's and the per-stage probe's clock
#endif

#ifdef FP8GEMM_TRACE
namespace fp8gemm::trace {

struct Rec {
  unsigned long long t0;  // %globaltimer at entry (ns)
  uint32_t d[4];          // ns from entry to marks 1..4 (0: not reached)
  uint16_t tag, sm;       // kernel kind, %smid
  uint32_t cta;           // linear block index
};
static_assert(sizeof(Rec) == 32, "record layout read by dev/trace_timeline.py");

constexpr uint32_t kCap = 1u << 20;  // records per translation unit (32 MB)
// One ring per translation unit (no relocatable device code): each .cu that traces defines a
// reader with FP8GEMM_TRACE_READER, and kernels/trace/trace.cu dumps them all.
static __device__ Rec g_ring[kCap];
static __device__ uint32_t g_count;

// Thread 0 reserves a slot (the atomic's result is only read at the end).
__device__ __forceinline__ uint32_t begin() { return threadIdx.x == 0 ? atomicAdd(&g_count, 1u) : 0u; }

// Thread 0 writes its record; t = entry and marks 1..3 of this thread (0: not reached).
__device__ __forceinline__ void end(uint32_t slot, uint16_t tag, const unsigned long long (&t)[4]) {
  if (threadIdx.x != 0) return;
  const unsigned long long t_end = ptx::globaltimer_ns();
  Rec r;
  r.t0 = t[0];
#pragma unroll
  for (int i = 0; i < 3; ++i) r.d[i] = t[i + 1] ? static_cast<uint32_t>(t[i + 1] - t[0]) : 0u;
  r.d[3] = static_cast<uint32_t>(t_end - t[0]);
  r.tag = tag;
  uint32_t sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  r.sm = static_cast<uint16_t>(sm);
  r.cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  g_ring[slot % kCap] = r;
}

// Thread 0 appends a tile record (FP8GEMM_TRACE_TILE): t = the CTA's marks (2 and 3 are the
// tile's), t_tile its start, t_fix after its fix-up (0: none).
__device__ __forceinline__ void tile(uint32_t slot, unsigned long long t_tile, const unsigned long long (&t)[4],
                                     unsigned long long t_fix, uint32_t info) {
  if (threadIdx.x != 0) return;
  const unsigned long long t_end = ptx::globaltimer_ns();
  auto rel = [&](unsigned long long x) { return x > t_tile ? static_cast<uint32_t>(x - t_tile) : 0u; };
  Rec r;
  r.t0 = t_tile;
  r.d[0] = rel(t[2]);
  r.d[1] = rel(t[3]);
  r.d[2] = rel(t_fix);
  r.d[3] = rel(t_end);
  r.tag = FP8GEMM_TRACE_TILE;
  uint32_t sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  r.sm = static_cast<uint16_t>(sm);
  r.cta = (blockIdx.x & 0xffffu) | info << 16;
  g_ring[slot % kCap] = r;
}

}  // namespace fp8gemm::trace

// At the top of a kernel body (every thread): the entry time, the slot and the kind. Marks live
// in thread 0's registers (no shared memory: the GEMM rings use all of it).
#define FP8GEMM_TRACE_BEGIN(tag)                                                  \
  unsigned long long fp8gemm_trace_t[4] = {fp8gemm::ptx::globaltimer_ns(), 0ull, 0ull, 0ull}; \
  const uint32_t fp8gemm_trace_slot = fp8gemm::trace::begin();                    \
  constexpr uint16_t fp8gemm_trace_tag = (tag)
// Mark i (1..3) now, by thread 0 (the only thread whose marks are recorded). The end is mark 4.
#define FP8GEMM_TRACE_MARK(i) (fp8gemm_trace_t[(i)] = fp8gemm::ptx::globaltimer_ns())
// Where a helper marks for its caller (stage_norm_row): the mark's address, or nullptr.
#define FP8GEMM_TRACE_MARK_PTR(i) (&fp8gemm_trace_t[(i)])
// Where thread 0 leaves the kernel (other threads: no effect).
#define FP8GEMM_TRACE_END() fp8gemm::trace::end(fp8gemm_trace_slot, fp8gemm_trace_tag, fp8gemm_trace_t)
// Per-tile records of a persistent or stream-K schedule: BEGIN(on) at the tile's start (on: the
// schedule writes them; the slot is reserved here, read at the end), FIX after its fix-up
// (stream-K: past the wait, before it), END(nkb, role) where it is stored or published.
#define FP8GEMM_TRACE_TILE_BEGIN(on) \
  unsigned long long fp8gemm_tile_t0 = fp8gemm::ptx::globaltimer_ns(), fp8gemm_tile_fix = 0ull; \
  const uint32_t fp8gemm_tile_slot = (on) ? fp8gemm::trace::begin() : 0u;                       \
  (void)fp8gemm_tile_t0;                                                                        \
  (void)fp8gemm_tile_fix;                                                                       \
  (void)fp8gemm_tile_slot
#define FP8GEMM_TRACE_TILE_FIX() (fp8gemm_tile_fix = fp8gemm::ptx::globaltimer_ns())
#define FP8GEMM_TRACE_TILE_END(nkb, role)                                                           \
  fp8gemm::trace::tile(fp8gemm_tile_slot, fp8gemm_tile_t0, fp8gemm_trace_t, fp8gemm_tile_fix,                       \
                       static_cast<uint32_t>((nkb) < 255 ? (nkb) : 255) | static_cast<uint32_t>(role) << 8)
// Defines extern "C" int NAME(void* dst, uint32_t cap, uint32_t* count): copies this
// translation unit's ring (cap records at most) and its append count.
#define FP8GEMM_TRACE_READER(NAME)                                                                   \
  extern "C" int NAME(void* dst, uint32_t cap, uint32_t* count) {                                  \
    const size_t n = cap < fp8gemm::trace::kCap ? cap : fp8gemm::trace::kCap;                       \
    if (cudaMemcpyFromSymbol(count, fp8gemm::trace::g_count, sizeof(uint32_t)) != cudaSuccess) return 1; \
    return cudaMemcpyFromSymbol(dst, fp8gemm::trace::g_ring, n * sizeof(fp8gemm::trace::Rec)) != cudaSuccess; \
  }
#else
#define FP8GEMM_TRACE_BEGIN(tag) \
  do {                           \
  } while (0)
#define FP8GEMM_TRACE_MARK(i) \
  do {                        \
  } while (0)
#define FP8GEMM_TRACE_MARK_PTR(i) nullptr
#define FP8GEMM_TRACE_END() \
  do {                      \
  } while (0)
#define FP8GEMM_TRACE_READER(NAME)
#define FP8GEMM_TRACE_TILE_BEGIN(on) \
  do {                             \
  } while (0)
#define FP8GEMM_TRACE_TILE_FIX() \
  do {                           \
  } while (0)
#define FP8GEMM_TRACE_TILE_END(nkb, role) \
  do {                                    \
  } while (0)
#endif

// Development per-stage probe of the GEMM main loop (nvcc -DFP8GEMM_TRACE_STAGES, e.g. through
// CANDLE_FP8_NVCC_FLAGS; read by `dev/harness.py stages`). Why: a mid-M K block costs ~200-300 ns
// whatever the ring depth, the number of TMA issuers or the math warpgroups' overlap; the probe
// splits it into the producer's wait for a free stage, the load's flight, the consumer's
// wait, its MMAs and its promotion. For the first tile of CTAs < kCtas and K blocks < kKb:
//   producer (the stage's issuing thread): t0 before its empty-barrier wait, t1 after it (the
//     loads are issued right after);
//   consumer (thread 0 of the warpgroup that owns the K block; warpgroup 0 when both do):
//     t0 before its full-barrier wait, t1 after it, t2 at the stage's release (the last
//     wgmma done), t3 after the K block's last promotion.
// Plain stores to fixed slots (no atomics), so the probe adds a few instructions per K block.
#ifdef FP8GEMM_TRACE_STAGES
namespace fp8gemm::stage_trace {
constexpr int kCtas = 264, kKb = 64;
struct StageRec {
  unsigned long long t[4];
};
static __device__ StageRec g_prod[kCtas][kKb];
static __device__ StageRec g_cons[kCtas][kKb];
__device__ __forceinline__ int cta() { return static_cast<int>(blockIdx.x + gridDim.x * blockIdx.y); }
__device__ __forceinline__ bool on(int kb) { return cta() < kCtas && kb >= 0 && kb < kKb; }
}  // namespace fp8gemm::stage_trace
#define FP8GEMM_STAGE_MARK(role, kb, i, cond)                                                       \
  do {                                                                                              \
    if ((cond) && fp8gemm::stage_trace::on(kb))                                                     \
      fp8gemm::stage_trace::g_##role[fp8gemm::stage_trace::cta()][(kb)].t[(i)] = fp8gemm::ptx::globaltimer_ns(); \
  } while (0)
// extern "C" int NAME(void* prod, void* cons, int clear): copies (or, clear != 0, zeroes) this
// translation unit's probe arrays.
#define FP8GEMM_STAGE_READER(NAME)                                                                  \
  extern "C" int NAME(void* prod, void* cons, int clear) {                                         \
    using fp8gemm::stage_trace::g_cons;                                                             \
    using fp8gemm::stage_trace::g_prod;                                                             \
    if (clear) {                                                                                    \
      void *a, *b;                                                                                  \
      if (cudaGetSymbolAddress(&a, g_prod) != cudaSuccess || cudaGetSymbolAddress(&b, g_cons) != cudaSuccess) \
        return 1;                                                                                   \
      return (cudaMemset(a, 0, sizeof(g_prod)) != cudaSuccess) || (cudaMemset(b, 0, sizeof(g_cons)) != cudaSuccess); \
    }                                                                                               \
    return (cudaMemcpyFromSymbol(prod, g_prod, sizeof(g_prod)) != cudaSuccess) ||                   \
           (cudaMemcpyFromSymbol(cons, g_cons, sizeof(g_cons)) != cudaSuccess);                     \
  }
#else
#define FP8GEMM_STAGE_MARK(role, kb, i, cond) \
  do {                                        \
  } while (0)
#define FP8GEMM_STAGE_READER(NAME)
#endif
