#!/bin/bash
# Session 9 call 8: split-2 cluster sum by push (each CTA owns half the columns, one barrier)
# vs the pull version (HEAD): correctness, A/B sweep in one call, timeline of the new one.
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$OUT/s9c8; mkdir -p $R
(cd bundle/kdev_old && bash build.sh > $R/build-old.txt 2>&1) &
(cd bundle/kdev && bash build.sh > $R/build-new.txt 2>&1) &
wait
mkdir -p bundle/kdev_probe && cp -r bundle/kdev/kernels bundle/kdev/build.sh bundle/kdev_probe/
(cd bundle/kdev_probe && EXTRA_FLAGS=-DFP8GEMM_PROBE bash build.sh > $R/build-probe.txt 2>&1) &
cd bundle/kdev
timeout 120 python3 harness.py check --shapes 64,4096,4096 48,1024,2048 100,4096,4096 130,256,1536 33,272,2048 > $R/check.txt 2>&1; tail -3 $R/check.txt
C=auto,small_m64x64s8k2,small_m64x32s8k2,small_m64x128s6k2,swap_ab8x64s8k2,swap_ab32x64s8k2,warp_spec128x128s6k2
SH="1,4096,4096 32,4096,4096 48,4096,4096 64,4096,4096 128,4096,4096 64,5120,8192"
for rep in 1 2; do
  for v in old new; do
    d=../kdev; [[ $v == old ]] && d=../kdev_old
    timeout 100 python3 harness.py --lib $d/libfp8gemm.so sweep --no-full --only $C --shapes $SH > $R/sweep-$v-$rep.txt 2>&1
  done
done
wait
timeout 60 python3 harness.py --lib ../kdev_probe/libfp8gemm.so probe --only small_m64x64s8k2,small_m64x32s8k2,small_m64x128s6k2 --shapes 64,4096,4096 32,4096,4096 > $R/probe.txt 2>&1
cat $R/probe.txt
python3 - $R <<'PY'
import sys, glob, collections
d = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/sweep-*.txt")):
    v = f.split("sweep-")[1].split("-")[0]
    for l in open(f):
        p = l.split()
        if p and p[0] == "SWEEP" and p[1] != "M":
            d[(p[1], p[2], p[3], p[4], v)].append((float(p[5]), float(p[6])))
keys = sorted({k[:4] for k in d})
for k in keys:
    o, n = d.get(k + ("old",), []), d.get(k + ("new",), [])
    fmt = lambda xs: " ".join(f"{h:.2f}/{c:.2f}" for h, c in xs)
    print(" ".join(k), "| old", fmt(o), "| new", fmt(n))
PY
cd $OUT && tar czf s9c8.tgz s9c8 && rm -rf s9c8
