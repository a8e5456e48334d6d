#!/bin/bash
# Session 10 call 5: is PDL chaining of back-to-back GEMMs what makes "into" slower than the
# allocating op at M = 1? Same harness sweep (a graph of back-to-back launches) with
# v0 = head, nopdl = GEMM launched without the PDL attribute, notrig = no early trigger.
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$OUT/s10c5; mkdir -p $R
for v in kdev kdev_nopdl kdev_notrig; do (cd bundle/$v && bash build.sh > $R/build-$v.txt 2>&1) & done
wait
cd bundle/kdev
C=auto,swap_ab8x64s8k2,swap_ab8x64s8k4
SH="1,4096,4096 1,10240,5120 1,5120,8192 1,5120,25600 1,51200,5120 16,10240,5120 64,4096,4096"
for rep in 1 2; do for v in kdev kdev_nopdl kdev_notrig; do
  timeout 100 python3 harness.py --lib ../$v/libfp8gemm.so sweep --no-full --only $C --shapes 1,1024,1024 $SH > $R/sweep-$v-$rep.txt 2>&1
done; done
python3 - $R <<'PY'
import sys, glob, collections
d = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/sweep-*.txt")):
    v = f.split("sweep-")[1].rsplit("-", 1)[0]
    for l in open(f):
        p = l.split()
        if p and p[0] == "SWEEP" and p[1] != "M":
            d[(int(p[1]), int(p[2]), int(p[3]), p[4])].append((v, f"{float(p[5]):.2f}/{float(p[6]):.2f}"))
for k, xs in sorted(d.items()):
    agg = collections.defaultdict(list)
    for v, s in xs: agg[v].append(s)
    print(*k, " | ".join(f"{v} {' '.join(s)}" for v, s in sorted(agg.items())))
PY
cd $OUT && tar czf s10c5.tgz s10c5 && rm -rf s10c5
