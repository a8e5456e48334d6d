#!/bin/bash
# Session 22 call 2 (harness route): (1) box_bench layouts: does the row stride (4096 / 4224 /
# 5120 / 8192) or a blocked layout change one SM's copy rate of GEMM operand boxes (L2-hot)?
# (2) the final kXPromote keys (s6 / s5 overlapped, s106 / s105 the previous loops): bitwise and
# torch check; (3) per-stage probe of the mid-M candidates at 256x4096^2 and 128x4096^2.
source scripts/dev/harness_prelude.sh
nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I kernels/include -I scripts/dev scripts/dev/box_bench.cu -o /tmp/box_bench
/tmp/box_bench layouts > $O/layouts.txt 2>&1
echo "layouts $(( $(date +%s) - T0 )) s"
$H --lib /tmp/lib_plain.so check --shapes 129,4096,4096 255,10240,5120 300,144,384 1000,1024,5120 \
  2048,4096,4096 77,256,128 > $O/check.txt 2>&1
tail -2 $O/check.txt
ONLY=auto,warp_spec128x128s6,warp_spec128x128s6k2,warp_spec128x128s6k3,warp_spec128x128s106,warp_spec128x128s106k2,warp_spec128x128s106k3,persistent128x128s5,persistent128x128s105
$H --lib /tmp/lib_plain.so sweep --no-full --only $ONLY --shapes 200,4096,4096 300,5120,8192 777,4096,5120 > $O/sweep.txt 2>&1
echo "sweep $(( $(date +%s) - T0 )) s"
wait $BPID
$H --lib /tmp/lib_stages.so stages --only small_m64x128s6,warp_spec128x128s6k2,persistent128x128s5 --shapes 256,4096,4096 > $O/stages.txt 2>&1
$H --lib /tmp/lib_stages.so stages --only small_m64x128s6k2,warp_spec128x128s6k4 --shapes 128,4096,4096 >> $O/stages.txt 2>&1
echo "stages $(( $(date +%s) - T0 )) s"
grep -E "WRONG|DIFFER|FAIL" $O/*.txt | head -20
grep -E "BITWISE" $O/sweep.txt | awk '{print $NF}' | sort | uniq -c
cat $O/layouts.txt
grep -A1 STAGES $O/stages.txt | cut -c1-220
grep "^SWEEP" $O/sweep.txt
