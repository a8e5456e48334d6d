#!/bin/bash
# Builds libfp8gemm.so from kernels/ (run from the folder holding kernels/). Parallel per .cu.
set -e
NVCC=${NVCC:-nvcc}
FLAGS="-gencode=arch=compute_90a,code=sm_90a -std=c++17 -O3 -Xcompiler -fPIC -I kernels/include -I kernels ${EXTRA_FLAGS:-}"  # EXTRA_FLAGS=-DFP8GEMM_TRACE: per-CTA timeline (harness.py probe)
mkdir -p build
for f in kernels/*.cu; do
  b=$(basename $f .cu)
  $NVCC $FLAGS -Xptxas -v -c $f -o build/$b.o > build/$b.log 2>&1 &
done
wait
for f in kernels/*.cu; do b=$(basename $f .cu); grep -q error build/$b.log && { cat build/$b.log; exit 1; }; done
grep -h -E "spill|Used" build/*.log | sort | uniq -c | sort -rn | head -20
$NVCC -shared -o libfp8gemm.so build/*.o
