// Standalone bit-exactness check of kernels/fused/fused_quant.cu against candle-kernels' own bf16
// kernels (rmsnorm, badd, usilu, bmul, compiled from the registry sources into cubins and
// loaded with the cudaLibrary API) followed by quant.cu, on ragged m and k from 128 to 25600.
// No cargo build needed: `bash dev/fused_check.sh OUTDIR` builds OUTDIR/fused_check
// and the cubins; on the GPU run `OUTDIR/fused_check OUTDIR`. Exit 0: all bit-identical.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <atomic>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <cmath>
#include <random>
#include <string>
#include <vector>
#include "api.h"

// candle's kernels, from cubins of the registry sources (cudaLibrary* runtime API).
static cudaKernel_t K_rms, K_add, K_mul, K_silu;
static cudaKernel_t load(const char* file, const char* name) {
  cudaLibrary_t lib;
  if (cudaLibraryLoadFromFile(&lib, file, nullptr, nullptr, 0, nullptr, nullptr, 0) != cudaSuccess) { printf("load %s failed\n", file); exit(2); }
  cudaKernel_t k;
  if (cudaLibraryGetKernel(&k, lib, name) != cudaSuccess) { printf("kernel %s failed\n", name); exit(2); }
  return k;
}
static void launch(cudaKernel_t k, dim3 g, dim3 b, void** args) {
  cudaError_t e = cudaLaunchKernel((const void*)k, g, b, args, 0, 0);
  if (e != cudaSuccess) { printf("launch: %s\n", cudaGetErrorString(e)); exit(2); }
}

namespace fp8gemm {
bool raise_smem_limit_once(const void* func, std::atomic<uint64_t>& done_mask, int device, size_t bytes) {
  const uint64_t bit = uint64_t(1) << (device & 63);
  if (done_mask.load() & bit) return true;
  if (cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) != cudaSuccess) return false;
  done_mask.fetch_or(bit);
  return true;
}
}

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA %s at %d: %s\n", #x, __LINE__, cudaGetErrorString(e)); exit(2); } } while (0)

static std::vector<__nv_bfloat16> rows(int64_t m, int64_t k, uint64_t seed, bool edge) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<__nv_bfloat16> v(m * k);
  for (int64_t i = 0; i < m * k; ++i) {
    float x = n(g) * powf(10.f, float((i / k) % 7) - 3.f);
    if (edge && m > 2 && i / k == 1) x = 0.f;
    if (edge && m > 2 && i / k == 2) x *= 1e21f;
    v[i] = __float2bfloat16(x);
  }
  return v;
}

template <class T> static T* dev_copy(const std::vector<T>& h) {
  T* d; CK(cudaMalloc(&d, h.size() * sizeof(T) + 16));
  CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
template <class T> static std::vector<uint8_t> host_bytes(const T* d, size_t n) {
  std::vector<uint8_t> h(n * sizeof(T));
  CK(cudaMemcpy(h.data(), d, h.size(), cudaMemcpyDeviceToHost));
  return h;
}
static int fails = 0;
static void cmp(const char* what, const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, int64_t m, int64_t k) {
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) { printf("FAIL %s m=%lld k=%lld: first byte diff at %zu\n", what, (long long)m, (long long)k, i); ++fails; return; }
}

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : ".";
  K_rms = load((dir + "/ck_reduce.cubin").c_str(), "rmsnorm_bf16");
  K_add = load((dir + "/ck_binary.cubin").c_str(), "badd_bf16");
  K_mul = load((dir + "/ck_binary.cubin").c_str(), "bmul_bf16");
  K_silu = load((dir + "/ck_unary.cubin").c_str(), "usilu_bf16");
  const int64_t ms[] = {1, 3, 16, 17, 129};
  const int64_t ks[] = {128, 256, 896, 1024, 5120, 25600};
  for (int64_t k : ks) for (int64_t m : ms) for (int res = 0; res < 2; ++res) {
    const int64_t m_pad = (m + 3) / 4 * 4, kb = k / 128;
    auto hx = rows(m, k, m * 31 + k, true), hr = rows(m, k, m * 17 + k + 5, false), hg = rows(1, k, k, false);
    for (auto& g : hg) g = __float2bfloat16(1.f + 0.2f * __bfloat162float(g));
    float eps = (m % 2 == 0) ? 1e-5f : 1e-6f;
    __nv_bfloat16 *x = dev_copy(hx), *r = dev_copy(hr), *g = dev_copy(hg), *h, *y, *hs;
    CK(cudaMalloc(&h, m * k * 2)); CK(cudaMalloc(&y, m * k * 2)); CK(cudaMalloc(&hs, m * k * 2));
    uint8_t *q1, *q2; float *s1, *s2;
    CK(cudaMalloc(&q1, m * k)); CK(cudaMalloc(&q2, m * k));
    CK(cudaMalloc(&s1, kb * m_pad * 4)); CK(cudaMalloc(&s2, kb * m_pad * 4));
    CK(cudaMemset(s1, 0, kb * m_pad * 4)); CK(cudaMemset(s2, 0xff, kb * m_pad * 4));
    CK(cudaMemset(q2, 0xff, m * k)); CK(cudaMemset(hs, 0xff, m * k * 2));
    // composed
    const __nv_bfloat16* src = x;
    size_t numel = m * k, nd = 2; const size_t* info = nullptr;
    if (res) { void* a[] = {&numel, &nd, &info, &x, &r, &h}; launch(K_add, dim3((m * k + 1023) / 1024), dim3(1024), a); src = h; }
    int bs = k < 1024 ? 32 : 1024, nc = (int)k;
    { void* a[] = {&src, &y, &g, &nc, &bs, &eps}; launch(K_rms, dim3(m), dim3(bs), a); }
    CK(cudaGetLastError());
    if (fp8gemm_quantize_act(y, FP8GEMM_BF16, q1, s1, m, k, 0)) { printf("quant failed\n"); return 2; }
    int st = fp8gemm_add_rmsnorm_quant(x, res ? r : nullptr, g, eps, res ? hs : nullptr, q2, s2, m, k, nullptr, 0, 0);
    if (st) { printf("FAIL add_rmsnorm status %d m=%lld k=%lld\n", st, (long long)m, (long long)k); ++fails; continue; }
    CK(cudaDeviceSynchronize());
    cmp(res ? "add_rmsnorm q (res)" : "rmsnorm q", host_bytes(q1, m * k), host_bytes(q2, m * k), m, k);
    cmp(res ? "add_rmsnorm sa (res)" : "rmsnorm sa", host_bytes(s1, kb * m_pad), host_bytes(s2, kb * m_pad), m, k);
    if (res) cmp("sum", host_bytes(h, m * k), host_bytes(hs, m * k), m, k);
    cudaFree(x); cudaFree(r); cudaFree(g); cudaFree(h); cudaFree(y); cudaFree(hs); cudaFree(q1); cudaFree(q2); cudaFree(s1); cudaFree(s2);
  }
  for (int64_t inter : ks) for (int64_t m : ms) {
    const int64_t m_pad = (m + 3) / 4 * 4, kb = inter / 128;
    auto hgu = rows(m, 2 * inter, m * 7 + inter, false);
    std::vector<__nv_bfloat16> hgate(m * inter), hup(m * inter);
    for (int64_t i = 0; i < m; ++i) for (int64_t c = 0; c < inter; ++c) {
      hgate[i * inter + c] = hgu[i * 2 * inter + c]; hup[i * inter + c] = hgu[i * 2 * inter + inter + c];
    }
    __nv_bfloat16 *gu = dev_copy(hgu), *gate = dev_copy(hgate), *up = dev_copy(hup), *sg, *a;
    CK(cudaMalloc(&sg, m * inter * 2)); CK(cudaMalloc(&a, m * inter * 2));
    uint8_t *q1, *q2; float *s1, *s2;
    CK(cudaMalloc(&q1, m * inter)); CK(cudaMalloc(&q2, m * inter));
    CK(cudaMalloc(&s1, kb * m_pad * 4)); CK(cudaMalloc(&s2, kb * m_pad * 4));
    CK(cudaMemset(s1, 0, kb * m_pad * 4)); CK(cudaMemset(s2, 0xff, kb * m_pad * 4)); CK(cudaMemset(q2, 0xff, m * inter));
    size_t numel = m * inter, nd = 2; const size_t* info = nullptr;
    { void* p[] = {&numel, &nd, &info, &gate, &sg}; launch(K_silu, dim3((m * inter + 1023) / 1024), dim3(1024), p); }
    { void* p[] = {&numel, &nd, &info, &sg, &up, &a}; launch(K_mul, dim3((m * inter + 1023) / 1024), dim3(1024), p); }
    CK(cudaGetLastError());
    if (fp8gemm_quantize_act(a, FP8GEMM_BF16, q1, s1, m, inter, 0)) { printf("quant failed\n"); return 2; }
    int st = fp8gemm_swiglu_quant(gu, m, inter, q2, s2, 0);
    if (st) { printf("FAIL swiglu status %d\n", st); ++fails; continue; }
    CK(cudaDeviceSynchronize());
    cmp("swiglu q", host_bytes(q1, m * inter), host_bytes(q2, m * inter), m, inter);
    cmp("swiglu sa", host_bytes(s1, kb * m_pad), host_bytes(s2, kb * m_pad), m, inter);
    cudaFree(gu); cudaFree(gate); cudaFree(up); cudaFree(sg); cudaFree(a); cudaFree(q1); cudaFree(q2); cudaFree(s1); cudaFree(s2);
  }
  printf("%s (%d failures)\n", fails ? "FAILED" : "ALL BIT-IDENTICAL", fails);
  return fails ? 1 : 0;
}
