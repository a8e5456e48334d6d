#!/bin/bash
# Session 21, call 7: per-stage probe of the GEMM main loop (kernels/include/fp8gemm/trace.cuh,
# FP8GEMM_TRACE_STAGES; scripts/dev/harness.py stages). Nothing to pack: the kernels are built
# on the device from the working tree (scripts/dev/build.sh) and driven through ctypes + torch.
# Why: a mid-M K block costs ~200-300 ns whatever the ring depth (sessions 7-9), the number of
# TMA issuers and the warpgroups' overlap (this session): where inside a K block does it go?
source scripts/dev/call_prelude.sh
EXTRA_FLAGS=-DFP8GEMM_TRACE_STAGES bash scripts/dev/build.sh > $R/build.txt 2>&1
echo "build rc=$? at $(elapsed)"
timeout 240 python3 scripts/dev/harness.py --lib ./libfp8gemm.so stages --shapes 64,4096,4096 \
  128,4096,4096 256,4096,4096 128,10240,5120 2048,4096,4096 1,10240,5120 16,5120,8192 \
  > $R/stages.txt 2>&1
echo "stages rc=$? at $(elapsed)"
cat $R/stages.txt
pack_out s21call7
