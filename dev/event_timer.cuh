// best_launch_us(launch, before): the fastest of 3 timed runs of `launch()` (after one warm-up
// run that also loads a hot source into L2), in microseconds from CUDA events; `before()` runs
// ahead of each (e.g. an L2 flush for cold timings). For the standalone dev copy benchmarks.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda_check.cuh"

template <class Launch, class Before>
static float best_launch_us(Launch launch, Before before) {
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  float best = 1e30f;
  for (int rep = 0; rep < 4; ++rep) {  // rep 0 warms up
    before(rep);
    CHECK(cudaEventRecord(e0));
    launch();
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    CHECK(cudaGetLastError());
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (rep > 0) best = std::min(best, ms);
  }
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  return best * 1e3f;
}
