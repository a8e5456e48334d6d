// Byte tensor maps (128-byte swizzle) for the dev copy benchmarks (ingest_bench.cu,
// layout_bench.cu): make_u8_map = `outer` rows of `inner` bytes, boxes of box_inner x
// box_outer; make_u8_map_kpair = 3-D boxes of two K blocks. Abort with the shape when the
// driver refuses one.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "cuda_check.cuh"

// A byte tensor map of `rank` dimensions (128-byte swizzle, 256-byte L2 promotion); aborts with
// `what` when the driver refuses it.
static CUtensorMap encode_u8_map(const void* base, cuuint32_t rank, const cuuint64_t* dims, const cuuint64_t* strides,
                                 const cuuint32_t* box, const char* what) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
  auto enc = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  CUtensorMap map{};
  const cuuint32_t estr[3] = {1, 1, 1};
  if (enc(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, rank, const_cast<void*>(base), dims, strides, box, estr,
          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled failed: %s\n", what);
    std::exit(1);
  }
  return map;
}

static CUtensorMap make_u8_map(const void* base, uint64_t inner, uint64_t outer, uint32_t box_inner,
                               uint32_t box_outer) {
  const cuuint64_t dims[2] = {inner, outer};
  const cuuint64_t strides[1] = {inner};
  const cuuint32_t box[2] = {box_inner, box_outer};
  char what[128];
  std::snprintf(what, sizeof what, "%llu x %llu bytes, box %u x %u", (unsigned long long)outer,
                (unsigned long long)inner, box_outer, box_inner);
  return encode_u8_map(base, 2, dims, strides, box, what);
}

// Rows of 256 bytes seen as two 128-byte K blocks (dims 128 B x rows x 2, strides 256 and 128):
// one box of box_rows x 2 lands as two consecutive slabs of box_rows x 128 B, as a ring stage
// of two K blocks would (ingest_bench.cu table 3).
static CUtensorMap make_u8_map_kpair(const void* base, uint64_t rows256, uint32_t box_rows) {
  const cuuint64_t dims[3] = {128, rows256, 2};
  const cuuint64_t strides[2] = {256, 128};
  const cuuint32_t box[3] = {128, box_rows, 2};
  char what[128];
  std::snprintf(what, sizeof what, "%llu rows of 256 B as K pairs, box %u rows", (unsigned long long)rows256, box_rows);
  return encode_u8_map(base, 3, dims, strides, box, what);
}
