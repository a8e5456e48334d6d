// A 2-D byte tensor map (128-byte swizzle) for the dev copy benchmarks (ingest_bench.cu,
// layout_bench.cu): `outer` rows of `inner` bytes, boxes of box_inner x box_outer; aborts with
// the shape when the driver refuses it.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "cuda_check.cuh"

static CUtensorMap make_u8_map(const void* base, uint64_t inner, uint64_t outer, uint32_t box_inner,
                               uint32_t box_outer) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
  auto enc = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  CUtensorMap map{};
  const cuuint64_t dims[2] = {inner, outer};
  const cuuint64_t strides[1] = {inner};
  const cuuint32_t box[2] = {box_inner, box_outer};
  const cuuint32_t estr[2] = {1, 1};
  if (enc(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box, estr,
          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled failed (%llu x %llu bytes, box %u x %u)\n",
                 (unsigned long long)outer, (unsigned long long)inner, box_outer, box_inner);
    std::exit(1);
  }
  return map;
}
