#!/bin/bash
# Session 21, call 8: two K-interleaved math warpgroups for the consumer-bound small-M tiles
# (development keys: 64x64 stages 108, 64x128 stages 206 at every split). Call 7's probe: at
# 64x4096^2 (64x64, split 2) the ring is full and one warpgroup's chain costs 320 ns per K block
# (64 wait + 160 MMA + 32 promotion + overhead) for ~70 ns of tensor work; two warpgroups taking
# alternate K blocks run two chains at once. Prediction: 64x64 split 2 at M = 33-64 from ~6.3 to
# ~5 us hot; 64x128 split 2 at M = 65-128 less (its chain is 384 ns for 140 ns of tensor work).
# Kernels built on the device (scripts/dev/build.sh); timed by harness.py sweep (CUDA-graph
# replays, hot and cold, each config checked against the torch reference first), two passes.
source scripts/dev/call_prelude.sh
bash scripts/dev/build.sh > $R/build.txt 2>&1
echo "build rc=$? at $(elapsed)"
ONLY=auto,small_m64x64s8k2,small_m64x64s108k2,small_m64x64s108k3,small_m64x64s108,small_m64x128s6k2,small_m64x128s206k2,small_m64x128s206k3,small_m64x128s206k4
for pass in 1 2; do
  timeout 150 python3 scripts/dev/harness.py --lib ./libfp8gemm.so sweep --no-full --only $ONLY \
    --shapes 32,4096,4096 48,4096,4096 64,4096,4096 96,4096,4096 128,4096,4096 64,5120,8192 \
    > $R/sweep-pass$pass.txt 2>&1
  echo "sweep pass $pass rc=$? at $(elapsed)"
done
grep -h "SWEEP\|WRONG" $R/sweep-pass*.txt | sort -k2,2n -k3,3n -k5,5 | awk '{print}'
pack_out s21call8
