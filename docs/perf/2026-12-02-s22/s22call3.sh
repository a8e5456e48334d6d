#!/bin/bash
# Session 22 call 3 (harness route): box_bench layouts with A / B in different layouts and every
# L2 promotion; the GEMM with its tensor maps' L2 promotion at 256 (default) / 128 / none
# (FP8GEMM_DEV_L2_PROMO, an experiment hook in kernels/gemm.cu).
set -u
O=${OUT:-/tmp/out}; mkdir -p $O
T0=$(date +%s)
H="python3 scripts/dev/harness.py"
bash scripts/dev/build.sh > $O/build.txt 2>&1 || { cat $O/build.txt; exit 1; }
nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I kernels/include -I scripts/dev scripts/dev/box_bench.cu -o /tmp/box_bench
/tmp/box_bench layouts > $O/layouts.txt 2>&1
echo "layouts $(( $(date +%s) - T0 )) s"
ONLY=auto,persistent128x128s5,persistent256x128s3,small_m64x128s6
for P in 256 128 0 256 128 0; do
  FP8GEMM_DEV_L2_PROMO=$P $H --lib ./libfp8gemm.so sweep --no-full --only $ONLY --shapes 256,4096,4096 2048,4096,4096 \
    4096,4096,4096 1,10240,5120 16,51200,5120 128,10240,5120 | grep "^SWEEP [0-9]" | sed "s/^SWEEP/PROMO$P/" >> $O/promo.txt
done
echo "promo $(( $(date +%s) - T0 )) s"
cat $O/layouts.txt | grep -v "^LAYOUT"
sort -k2,2n -k3,3n -k4,4n -k5,5 -s $O/promo.txt | awk '{printf "%s %sx%sx%s %s %s/%s\n",$1,$2,$3,$4,$5,$6,$7}'
