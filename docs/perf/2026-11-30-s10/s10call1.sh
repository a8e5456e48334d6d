#!/bin/bash
# Session 10 call 1: GPU suites on head (incl. the new `into` test), the ingest benchmark,
# and swap-AB 16-token tiles with 6/7/8 stages (3 vs 2 CTAs per SM) at M = 9-16.
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$OUT/s10c1; mkdir -p $R
(cd bundle/kdev && bash build.sh > $R/build.txt 2>&1; nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I kernels/include ingest_bench.cu -o ingest_bench >> $R/build.txt 2>&1) &
OUT=$R/t PACK=0 bash bundle/gpu_run.sh env test > $R/tests.txt 2>&1
tail -4 $R/tests.txt
grep -E "into_preallocated|SKIP" $R/t/test.log | head
wait
cd bundle/kdev
timeout 100 ./ingest_bench > $R/ingest.txt 2>&1; echo "ingest rc=$? $(wc -l < $R/ingest.txt) lines"
timeout 120 python3 harness.py check --shapes 16,51200,5120 9,4096,4096 13,5120,8192 16,5120,25600 11,272,2048 > $R/check.txt 2>&1; tail -3 $R/check.txt
C=swap_ab8x64s8
for s in 6 7 8; do C=$C,swap_ab16x64s$s; for k in 2 3 4 5 6 8 10; do C=$C,swap_ab16x64s${s}k$k,swap_ab8x64s8k$k; done; done
SH="16,51200,5120 16,10240,5120 16,5120,8192 16,5120,25600 16,4096,4096 12,51200,5120 9,4096,4096 8,51200,5120"
for rep in 1 2; do
timeout 150 python3 harness.py sweep --no-full --only $C --shapes $SH > $R/sweep-$rep.txt 2>&1
done
python3 - $R <<'PY'
import sys, glob, collections
d = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/sweep-*.txt")):
    for l in open(f):
        p = l.split()
        if p and p[0] == "SWEEP" and p[1] != "M":
            d[(int(p[1]), int(p[2]), int(p[3]), p[4])].append((float(p[5]), float(p[6])))
for k in sorted(d):
    print(*k, " ".join(f"{h:.2f}/{c:.2f}" for h, c in d[k]))
PY
cd $OUT && tar czf s10c1.tgz s10c1 && rm -rf s10c1
