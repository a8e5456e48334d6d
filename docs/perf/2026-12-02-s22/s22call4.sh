#!/bin/bash
# Session 22 call 4 (harness route): the GEMM with blocked operands (FP8GEMM_DEV_BLOCKED, an
# experiment in launch.cuh; harness.py blocked): layouts 0 row-major, 1 activations blocked,
# 2 weights blocked, 3 both, then 0 again; checked against the reference and bitwise vs 0.
set -u
O=${OUT:-/tmp/out}; mkdir -p $O
T0=$(date +%s)
H="python3 scripts/dev/harness.py"
bash scripts/dev/build.sh > $O/build.txt 2>&1 || { cat $O/build.txt; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
$H blocked --only persistent128x128s5,warp_spec128x128s6k2,small_m64x128s6 --shapes 256,4096,4096 > $O/blocked.txt 2>&1
$H blocked --only persistent128x128s5 --shapes 512,4096,4096 2048,4096,4096 4096,4096,4096 2048,5120,8192 2048,10240,5120 >> $O/blocked.txt 2>&1
$H blocked --only warp_spec128x128s6,small_m64x128s6k2 --shapes 128,10240,5120 128,4096,4096 >> $O/blocked.txt 2>&1
echo "blocked $(( $(date +%s) - T0 )) s"
grep -v "^BLOCKED M" $O/blocked.txt
