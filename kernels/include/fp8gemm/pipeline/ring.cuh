// The shared-memory ring between the TMA producer and the wgmma consumers.
//
// Each stage holds one 128-wide K block: the MMA "A" tile [TM rows x 128 B], the MMA "B" tile
// [TN rows x 128 B] (both 128B-swizzled, K-major, 1024-byte aligned) and the activation
// scales of that K block for the tile's tokens (TMA-loaded, MN-major). Per stage a "full"
// barrier (producer arrive + TMA bytes) and an "empty" barrier (one arrive per consumer warp).
// After the ring: an optional output staging area (kStoreBytes, 1024-aligned) for the
// TMA-store epilogue, an optional inbox (kInboxBytes) where the other CTA of a split-K
// cluster pushes its partial sums, then the barriers and the per-tile weight-scale cache.
#pragma once
#include <cstdint>

#include "fp8gemm/ptx/mbarrier.cuh"

namespace fp8gemm {

constexpr int kBlockK = 128;  // one FP8 scale block along K = one stage = 4 x wgmma k32

__host__ __device__ constexpr int round_up_c(int x, int a) { return (x + a - 1) / a * a; }

// kWeightBarriers: a third set of per-stage barriers, "weights landed", and a "released" barrier
// (the previous kernel is done), for the swap-AB decode tiles whose pre-wait fill is paced (the
// first pass through the ring loads the weights and the activations under separate barriers;
// impls/sm90_fp8_gemm_1d2d.cuh).
template <int kStages_, int TM, int TN, int kScaleTokens, int kStoreBytes = 0, int kInboxBytes = 0,
          bool kWeightBarriers = false>
struct SmemRing {
  static constexpr int kStages = kStages_;
  static constexpr int kABytes = TM * kBlockK;
  static constexpr int kBBytes = TN * kBlockK;
  static constexpr int kSBytes = kScaleTokens * 4;            // bytes of the token scales
  static constexpr int kSSlot = round_up_c(kSBytes, 128);     // slot size in the ring
  static constexpr int kTxBytes = kABytes + kBBytes + kSBytes;  // expect_tx per stage
  static constexpr int kRingBytes = kStages * (kABytes + kBBytes + kSSlot);
  // full, empty [, weights landed, released]
  static constexpr int kBarrierBytes = (kWeightBarriers ? 3 * kStages + 1 : 2 * kStages) * 8;
  static constexpr int kStoreOff = round_up_c(kRingBytes, 1024);
  static constexpr int kInboxOff = kStoreOff + kStoreBytes;
  static constexpr int kBarrierOff = kInboxOff + round_up_c(kInboxBytes, 1024);
  // Everything but the per-tile weight-scale cache; +1024 for aligning the base.
  static constexpr int kFixedBytes = kBarrierOff + kBarrierBytes + 1024;

  static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0,
                "128B-swizzled tiles need 1024-byte alignment: TM, TN multiples of 8");
  static_assert(kStages >= 2 && kStages <= 32, "stages");

  uint8_t* base;  // 1024-byte aligned

  // Aligned by an offset from `raw` (not by integer casts of the pointer): the compiler then
  // still knows every derived pointer is in shared memory and emits ld/st.shared, not generic
  // loads (which took the slower generic path in the main loop).
  __device__ __forceinline__ explicit SmemRing(uint8_t* raw)
      : base(raw + ((1024u - (ptx::smem_addr(raw) & 1023u)) & 1023u)) {}

  __device__ __forceinline__ uint8_t* a(int s) const { return base + s * kABytes; }
  __device__ __forceinline__ uint8_t* b(int s) const { return base + kStages * kABytes + s * kBBytes; }
  __device__ __forceinline__ float* scales(int s) const {
    return reinterpret_cast<float*>(base + kStages * (kABytes + kBBytes) + s * kSSlot);
  }
  __device__ __forceinline__ uint64_t* full(int s) const {
    return reinterpret_cast<uint64_t*>(base + kBarrierOff) + s;
  }
  __device__ __forceinline__ uint64_t* empty(int s) const {
    return reinterpret_cast<uint64_t*>(base + kBarrierOff) + kStages + s;
  }
  __device__ __forceinline__ uint64_t* wfull(int s) const {
    static_assert(kWeightBarriers, "no weight barriers in this ring");
    return reinterpret_cast<uint64_t*>(base + kBarrierOff) + 2 * kStages + s;
  }
  __device__ __forceinline__ uint64_t* released() const {
    static_assert(kWeightBarriers, "no weight barriers in this ring");
    return reinterpret_cast<uint64_t*>(base + kBarrierOff) + 3 * kStages;
  }
  // Per-tile cache of weight scales, after the barriers.
  __device__ __forceinline__ float* sw_cache() const {
    return reinterpret_cast<float*>(base + kBarrierOff + kBarrierBytes);
  }
  // Output staging of the TMA-store epilogue (kStoreBytes > 0).
  __device__ __forceinline__ uint8_t* store() const { return base + kStoreOff; }
  // Partial sums pushed by the other CTA of a split-K cluster (kInboxBytes > 0).
  __device__ __forceinline__ float* inbox() const { return reinterpret_cast<float*>(base + kInboxOff); }

  // One thread: full barriers expect the TMA thread's arrive, empty ones one arrive per consumer
  // warp.
  __device__ __forceinline__ void init(uint32_t consumer_warps) const {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbarrier_init(full(s), 1);
      ptx::mbarrier_init(empty(s), consumer_warps);
      if constexpr (kWeightBarriers) ptx::mbarrier_init(wfull(s), 1);
    }
    if constexpr (kWeightBarriers) ptx::mbarrier_init(released(), 1);
    ptx::fence_barrier_init();
  }
};

// A consumer warp is done with a stage: lane 0 arrives on its empty barrier.
template <class Ring>
__device__ __forceinline__ void release_stage(const Ring& ring, int stage, int lane) {
  if (lane == 0) ptx::mbarrier_arrive(ring.empty(stage));
}

// Position in the ring; producer and consumers each keep one and advance in lock step.
template <int kStages>
struct RingState {
  int stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
};

}  // namespace fp8gemm
