#!/bin/bash
# Session 15 call 1: the 64x96 small-M tile — correctness (harness check, NaN-poisoned, ragged
# N straddling weight-scale blocks) then a sweep against the existing mid-M configs.
cd "$(dirname "$0")/../.."
H="python3 scripts/dev/harness.py --lib bundle/dev/libfp8gemm.so"
nvidia-smi --query-gpu=name,serial,clocks.sm,power.draw --format=csv,noheader
$H check --shapes 160,4096,4096 192,4096,4096 129,272,2048 150,1040,4096 200,3072,4096 256,2048,8192 37,4096,1024 1,4096,4096 2>&1 | tail -12
compute-sanitizer --tool memcheck $H sanitize --quick 2>&1 | tail -4
ONLY=auto,small_m64x96s8,small_m64x96s8k2,small_m64x96s8k3,small_m64x128s6,small_m64x128s6k2,small_m64x64s8,small_m64x64s8k2,warp_spec128x128s6,warp_spec128x64s8
$H sweep --no-full --only $ONLY --shapes 129,4096,4096 160,4096,4096 192,4096,4096 224,4096,4096 256,4096,4096 \
  192,2048,4096 160,2048,8192 192,3072,4096 160,5120,8192 192,5120,25600 192,10240,5120 128,4096,4096 96,4096,4096 2>&1 | grep -v "^SWEEP M"
