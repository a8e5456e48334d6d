#!/bin/bash
# Session 21, call 9: scripts/dev/box_bench.cu — do 3-D TMA boxes spanning two K blocks copy like
# one big box? (The next mid-M idea, docs/PERF.md "Session 21" Next 2; nothing packed: built here.)
source scripts/dev/call_prelude.sh
nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I kernels/include -I scripts/dev \
  scripts/dev/box_bench.cu -o $R/box_bench > $R/build.txt 2>&1
echo "build rc=$? at $(elapsed)"
timeout 120 $R/box_bench > $R/box.txt 2>&1
echo "box_bench rc=$? at $(elapsed)"
cat $R/box.txt
rm -f $R/box_bench
pack_out s21call9
