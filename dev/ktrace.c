// Kernel timeline of any CUDA process, without nsys: a CUPTI injection library.
//
//   CUDA_INJECTION64_PATH=/path/ktrace.so KTRACE_OUT=trace.csv ./program ...
//
// The driver loads this library at cuInit and calls InitializeInjection(); we enable CUPTI's
// concurrent-kernel activity records (start/end of every kernel as the GPU ran it, so PDL
// overlap between kernels is visible) and write one CSV line per kernel:
//   start_ns,end_ns,stream,grid_x,grid_y,grid_z,block_x,dyn_smem,name(mangled)
// With KTRACE_LMEM_OUT=file, kernels using local memory also go there:
//   local_bytes_per_thread,context_local_total,name
// Build (here): gcc -shared -fPIC -O2 -I<cupti include> -I<cuda include> ktrace.c -o ktrace.so
//               -L<cupti lib> -l:libcupti.so.13
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>

static FILE* g_out = NULL;
static FILE* g_lmem = NULL;

static void CUPTIAPI buffer_requested(uint8_t** buf, size_t* size, size_t* max_records) {
  *size = 16u << 20;
  *buf = (uint8_t*)aligned_alloc(8, *size);
  *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buf, size_t size,
                                      size_t valid) {
  (void)ctx;
  (void)stream;
  (void)size;
  CUpti_Activity* rec = NULL;
  while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
      continue;
    const CUpti_ActivityKernel10* k = (const CUpti_ActivityKernel10*)rec;
    if (g_out)
      fprintf(g_out, "%llu,%llu,%u,%d,%d,%d,%d,%d,%s\n", (unsigned long long)k->start,
              (unsigned long long)k->end, k->streamId, k->gridX, k->gridY, k->gridZ, k->blockX,
              k->dynamicSharedMemory, k->name ? k->name : "?");
    // KTRACE_LMEM_OUT: kernels that use local memory (per-thread bytes, the context's total
    // local-memory reservation when they ran) — what can grow the device footprint for good.
    if (g_lmem && k->localMemoryPerThread > 0)
      fprintf(g_lmem, "%u,%llu,%s\n", k->localMemoryPerThread,
              (unsigned long long)k->localMemoryTotal_v2, k->name ? k->name : "?");
  }
  free(buf);
}

// Flush before the context goes away (records of a destroyed context are lost).
static void CUPTIAPI on_resource(void* ud, CUpti_CallbackDomain dom, CUpti_CallbackId id,
                                 const void* data) {
  (void)ud;
  (void)data;
  if (dom == CUPTI_CB_DOMAIN_RESOURCE && id == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING)
    cuptiActivityFlushAll(1);
}

static void at_exit(void) {
  cuptiActivityFlushAll(1);
  if (g_out) fclose(g_out);
  if (g_lmem) fclose(g_lmem);
  g_out = g_lmem = NULL;
}

int InitializeInjection(void) {
  const char* path = getenv("KTRACE_OUT");
  g_out = fopen(path ? path : "ktrace.csv", "w");
  const char* lpath = getenv("KTRACE_LMEM_OUT");
  if (lpath) g_lmem = fopen(lpath, "w");
  if (!g_out) return 0;
  CUpti_SubscriberHandle sub;
  cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_resource, NULL);
  cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RESOURCE);
  cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) return 0;
  atexit(at_exit);
  return 1;
}
