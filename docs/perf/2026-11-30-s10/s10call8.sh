#!/bin/bash
# Session 10 call 8: swap-AB 16-token tiles without N halves (one full-width m64n16 wgmma per
# K block instead of two m64n8 halves that each read the 64-row weight tile from shared
# memory): harness check + sweep (dev key s108 vs s8), then decode b16 / b1 with the 16 x 64 x 8
# config built without halves (nh) vs 178dcd5 (old), interleaved, three times.
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$OUT/s10c8; mkdir -p $R bundle/bin bundle/bin_old bundle/bin_nh
(cd bundle/kdev && bash build.sh > $R/build.txt 2>&1) &
xz -dc bundle/dec/decode_old.xz > bundle/bin_old/decode && xz -dc bundle/dec/decode_nh.xz > bundle/bin_nh/decode && chmod +x bundle/bin_old/decode bundle/bin_nh/decode && cp bundle/bin_nh/decode bundle/bin/decode
cp bundle/kdev/decode_sweep.sh scripts/dev/decode_sweep.sh
wait
cd bundle/kdev
timeout 100 python3 harness.py check --shapes 16,51200,5120 9,4096,4096 13,5120,8192 16,5120,25600 11,272,2048 24,1024,1536 > $R/check.txt 2>&1; tail -2 $R/check.txt; grep FAIL $R/check.txt | head -5
C=swap_ab16x64s8,swap_ab16x64s108
for k in 2 3 4; do C=$C,swap_ab16x64s8k$k,swap_ab16x64s108k$k; done
for rep in 1 2; do timeout 100 python3 harness.py sweep --no-full --only $C --shapes 16,51200,5120 16,10240,5120 16,5120,8192 16,5120,25600 16,4096,4096 12,51200,5120 > $R/sweep-$rep.txt 2>&1; done
python3 - $R <<'PY'
import sys, glob, collections
d = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/sweep-*.txt")):
    for l in open(f):
        p = l.split()
        if p and p[0] == "SWEEP" and p[1] != "M":
            d[(int(p[1]), int(p[2]), int(p[3]))].append((p[4], f"{float(p[5]):.2f}/{float(p[6]):.2f}"))
for k, v in sorted(d.items()):
    agg = collections.defaultdict(list)
    for n, s in v: agg[n].append(s)
    print(*k, " | ".join(f"{n} {' '.join(x)}" for n, x in sorted(agg.items())))
PY
cd ../..
OUT=$R/dec REPEAT=3 bash scripts/dev/decode_sweep.sh "DECODE_BIN=bundle/bin_old/decode DECODE_BIN=bundle/bin_nh/decode" "16 1" > $R/decode.txt 2>&1
cat $R/dec/sweep-table.txt
cd $OUT && tar czf s10c8.tgz s10c8 && rm -rf s10c8
