// What does a kernel boundary cost in a decode step's launch chain, and what would a flag
// handoff inside one persistent kernel cost instead?
//
// Why: at batch 1 a Qwen3-32B layer spends ~26 µs on its critical
// path in the small kernels between the four GEMMs (two norms, attention, SiLU·up), each a
// kernel boundary on either side. A persistent "layer" kernel would replace boundaries with
// device-wide flags; this measures both mechanisms with no work around them.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I kernels/include -I dev \
//        dev/boundary_bench.cu -o boundary_bench
//   ./boundary_bench
//
// 1. chain: N launches of a trivial kernel (grid CTAs x 128 threads) captured in a CUDA graph,
//    each waiting for the previous one (griddepcontrol.wait under PDL, stream order without) and
//    then extending a dependent chain through global memory (CTA 0 reads the previous kernel's
//    counter and writes it + 1). PDL triggers at entry (as our small kernels do) or at the end.
//    Prints µs per kernel = per boundary.
// 2. the same chain launched straight into the stream (no graph), as the decode step runs:
//    a spin kernel holds the GPU while the host queues the N launches, so the time from
//    the spin's end to the last kernel's end is the GPU's cost per boundary, not the host's
//    launch rate (does capturing the decode step in a graph shorten boundaries?).
// 3. handoff: one kernel, two CTAs on different SMs passing a token through a global flag
//    (st.release.gpu / ld.acquire.gpu polling), N times each way: µs per one-way handoff.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "cuda_check.cuh"
#include "fp8gemm/ptx/flag.cuh"

template <bool kPdl, bool kTriggerEarly>
__global__ void __launch_bounds__(128) step_kernel(unsigned* counter) {
  if constexpr (kPdl && kTriggerEarly) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if constexpr (kPdl) asm volatile("griddepcontrol.wait;" ::: "memory");
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    const unsigned v = *reinterpret_cast<volatile unsigned*>(counter);
    *reinterpret_cast<volatile unsigned*>(counter) = v + 1;
  }
  if constexpr (kPdl && !kTriggerEarly) {
    __syncthreads();
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  }
}

using fp8gemm::ptx::ld_acquire_gpu;
// A release store (the library's flags count with red.release; this handoff measures st.release).
__device__ __forceinline__ void st_release(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// CTAs 0 and `peer` ping-pong: CTA 0 owns even values, the peer odd ones. The big dynamic
// shared memory request keeps the two CTAs on different SMs.
__global__ void __launch_bounds__(32) handoff_kernel(unsigned* flag, int rounds, int peer) {
  if (threadIdx.x != 0) return;
  const bool first = blockIdx.x == 0;
  if (!first && static_cast<int>(blockIdx.x) != peer) return;
  for (int i = 0; i < rounds; ++i) {
    const unsigned mine = 2u * i + (first ? 0u : 1u);
    while (ld_acquire_gpu(flag) != mine) {
    }
    st_release(flag, mine + 1);
  }
}

// Launch configuration of one chain kernel: `grid` CTAs x 128 threads on `s`, with or without
// the PDL attribute (`lc` points at `attr`: not copyable).
struct ChainLaunch {
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t lc = {};
  ChainLaunch(int grid, bool pdl, cudaStream_t s) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
    lc.gridDim = dim3(grid);
    lc.blockDim = dim3(128);
    lc.stream = s;
    lc.attrs = attr;
    lc.numAttrs = 1;
  }
  ChainLaunch(const ChainLaunch&) = delete;
  ChainLaunch& operator=(const ChainLaunch&) = delete;
};

// Holds the stream for `ns` nanoseconds of %globaltimer (one thread).
__global__ void spin_kernel(long long ns) {
  long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

template <bool kPdl, bool kTriggerEarly>
float chain_stream_us(int grid, int n, unsigned* counter, cudaStream_t s) {
  const ChainLaunch cl(grid, kPdl, s);
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  float best = 1e30f;
  for (int rep = 0; rep < 4; ++rep) {  // the first round warms the module and the queue up
    spin_kernel<<<1, 1, 0, s>>>(20 * 1000 * 1000);  // 20 ms: far longer than queuing n launches
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(a, s));
    for (int i = 0; i < n; ++i) CHECK(cudaLaunchKernelEx(&cl.lc, step_kernel<kPdl, kTriggerEarly>, counter));
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    if (rep > 0 && ms < best) best = ms;
  }
  return best * 1e3f / n;
}

template <bool kPdl, bool kTriggerEarly>
float chain_us(int grid, int n, unsigned* counter, cudaStream_t s) {
  const ChainLaunch cl(grid, kPdl, s);
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < n; ++i) CHECK(cudaLaunchKernelEx(&cl.lc, step_kernel<kPdl, kTriggerEarly>, counter));
  CHECK(cudaStreamEndCapture(s, &g));
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  CHECK(cudaGraphLaunch(ge, s));  // warm-up
  CHECK(cudaStreamSynchronize(s));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  const int reps = 10;
  CHECK(cudaEventRecord(a, s));
  for (int r = 0; r < reps; ++r) CHECK(cudaGraphLaunch(ge, s));
  CHECK(cudaEventRecord(b, s));
  CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g));
  return ms * 1e3f / (reps * n);
}

int main() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned* counter;
  CHECK(cudaMalloc(&counter, 64));
  CHECK(cudaMemset(counter, 0, 64));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int n = 400;
  std::printf("chain of %d trivial kernels in one graph: us per kernel (= per boundary)\n", n);
  std::printf("%8s %10s %14s %14s\n", "grid", "no PDL", "PDL trig start", "PDL trig end");
  for (int grid : {1, 13, sms, 3 * sms}) {
    const float a = chain_us<false, true>(grid, n, counter, s);
    const float b = chain_us<true, true>(grid, n, counter, s);
    const float c = chain_us<true, false>(grid, n, counter, s);
    std::printf("%8d %10.3f %14.3f %14.3f\n", grid, a, b, c);
  }
  unsigned expect = 0;
  CHECK(cudaMemcpy(&expect, counter, 4, cudaMemcpyDeviceToHost));
  std::printf("counter %u (expected %u: every launch saw its predecessor's write)\n", expect,
              4u * 3u * 11u * n);
  std::printf("same chain, launched into the stream (queued behind a spin kernel): us per kernel\n");
  std::printf("%8s %10s %14s %14s\n", "grid", "no PDL", "PDL trig start", "PDL trig end");
  for (int grid : {1, 13, sms, 3 * sms}) {
    const float a = chain_stream_us<false, true>(grid, n, counter, s);
    const float b = chain_stream_us<true, true>(grid, n, counter, s);
    const float c = chain_stream_us<true, false>(grid, n, counter, s);
    std::printf("%8d %10.3f %14.3f %14.3f\n", grid, a, b, c);
  }

  // Flag handoff: two CTAs on different SMs (one per SM forced by shared memory).
  CHECK(cudaFuncSetAttribute(handoff_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  const int rounds = 20000;
  for (int peer : {1, sms / 2, sms - 1}) {
    CHECK(cudaMemset(counter, 0, 4));
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    CHECK(cudaEventRecord(a, s));
    handoff_kernel<<<sms, 32, 200 * 1024, s>>>(counter, rounds, peer);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    unsigned v = 0;
    CHECK(cudaMemcpy(&v, counter, 4, cudaMemcpyDeviceToHost));
    std::printf("handoff CTA 0 <-> CTA %3d: %.3f us per one-way handoff (flag %u, expected %u)\n", peer,
                ms * 1e3f / (2.0f * rounds), v, 2u * rounds);
  }
  return 0;
}
