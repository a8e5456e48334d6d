// Portable helper kernels for the `dequant` provider (any CUDA device, sm_80+).
//
// Compiled by build.rs to PTX for compute_80 (`nvcc -ptx`) and loaded at run time through
// candle's `get_or_load_custom_func`, so they run on devices our sm_90a kernels cannot.
// No headers: e4m3 decoding and bf16 rounding are spelled out here.
//
//   dequant_weight_{f32,bf16}: out[r][c] = e4m3(w[r][c]) * sw[r/128][c/128]   (any n, k)
//   dequant_act_f32:           out[r][c] = e4m3(q[r][c]) * sa[(c/128) * m_pad + r]
//   f32_to_bf16:               round-to-nearest-even, NaN preserved

#include <stdint.h>

__device__ __forceinline__ float e4m3_to_f32(uint8_t v) {
  const uint32_t sign = (v & 0x80u) << 24;
  const uint32_t exp = (v >> 3) & 0xFu;
  const uint32_t man = v & 0x7u;
  if (exp == 0xFu && man == 0x7u) return __int_as_float(0x7FC00000u | sign);  // NaN
  float mag;
  if (exp == 0) {
    mag = (float)man * 0.001953125f;  // subnormal: man * 2^-9
  } else {
    mag = __int_as_float(((exp + 120u) << 23) | (man << 20));  // bias 7 -> 127
  }
  return sign ? -mag : mag;
}

__device__ __forceinline__ uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

template <typename Out>
__device__ __forceinline__ void store(Out* p, float v);
template <>
__device__ __forceinline__ void store<float>(float* p, float v) { *p = v; }
template <>
__device__ __forceinline__ void store<uint16_t>(uint16_t* p, float v) { *p = f32_to_bf16_bits(v); }

template <typename Out>
__device__ void dequant_weight(const uint8_t* __restrict__ w, const float* __restrict__ sw,
                               Out* __restrict__ out, int64_t n, int64_t k) {
  const int64_t kb = (k + 127) / 128;
  const int64_t total = n * k;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / k, c = i - r * k;
    store(out + i, e4m3_to_f32(w[i]) * sw[(r / 128) * kb + c / 128]);
  }
}

extern "C" __global__ void candle_fp8_dequant_weight_f32(const uint8_t* w, const float* sw,
                                                         float* out, int64_t n, int64_t k) {
  dequant_weight<float>(w, sw, out, n, k);
}

extern "C" __global__ void candle_fp8_dequant_weight_bf16(const uint8_t* w, const float* sw,
                                                          uint16_t* out, int64_t n, int64_t k) {
  dequant_weight<uint16_t>(w, sw, out, n, k);
}

extern "C" __global__ void candle_fp8_dequant_act_f32(const uint8_t* __restrict__ q,
                                                      const float* __restrict__ sa,
                                                      float* __restrict__ out, int64_t m,
                                                      int64_t k, int64_t m_pad) {
  const int64_t total = m * k;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / k, c = i - r * k;
    out[i] = e4m3_to_f32(q[i]) * sa[(c / 128) * m_pad + r];
  }
}

extern "C" __global__ void candle_fp8_f32_to_bf16(const float* __restrict__ in,
                                                  uint16_t* __restrict__ out, int64_t len) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len;
       i += (int64_t)gridDim.x * blockDim.x) {
    out[i] = f32_to_bf16_bits(in[i]);
  }
}

// dst[r][c] = c < cols ? src[r][c] : 0, dst rows `dst_cols` wide (pads the K blocks of the
// weight scales to a multiple of 4 for cuBLASLt).
extern "C" __global__ void candle_fp8_pad_cols_f32(const float* __restrict__ src,
                                                   float* __restrict__ dst, int64_t rows,
                                                   int64_t cols, int64_t dst_cols) {
  const int64_t total = rows * dst_cols;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / dst_cols, c = i - r * dst_cols;
    dst[i] = c < cols ? src[r * cols + c] : 0.0f;
  }
}
