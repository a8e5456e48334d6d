#!/bin/bash
# Session 28 call 6: (1) how many clusters of each size fit at once (scripts/dev/cluster_fit.cu):
# the 4-CTA cluster sums of call 2 ran ~2x a one-wave time; (2) the persistent 128x128 tile's
# split tail (every tile in 2-4 K ranges, partials summed in the kernel through global memory)
# at mid M on 4096^2: at M = 64 split 4 moves 192 KB per CTA (A rows past M are TMA zero fill)
# vs the dispatched 64x64 split 2's 256 KB, but pays the fix-up (~1.2-1.8 us publish, ~1.6 us
# finish in session 27's stream-K records).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"; T0=$(date +%s)
nvcc -arch=sm_90a -o /tmp/cluster_fit scripts/dev/cluster_fit.cu && /tmp/cluster_fit > $O/cluster_fit.txt 2>&1
echo "cluster_fit rc=$?"
bash scripts/dev/build.sh > $O/build.txt 2>&1 && cp libfp8gemm.so /tmp/lib_plain.so || { tail $O/build.txt; exit 1; }
echo "build at $(( $(date +%s) - T0 )) s"
P=persistent128x128s5
timeout 120 python3 scripts/dev/harness.py --lib /tmp/lib_plain.so sweep --no-full --only auto,${P}k2,${P}k3,${P}k4 \
  --shapes 64,4096,4096 96,4096,4096 128,4096,4096 192,4096,4096 > $O/sweep.txt 2>&1
echo "sweep rc=$? at $(( $(date +%s) - T0 )) s"
cat $O/cluster_fit.txt
grep -h "^SWEEP [0-9]\|WRONG" $O/sweep.txt | awk '{printf "%5s %6s %6s %-24s %8s %8s\n", $2, $3, $4, $5, $6, $7}'
