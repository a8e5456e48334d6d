#!/bin/bash
# Session 10 call 2: ingest benchmark table 2 (stage size, boxes per stage, try_wait vs
# test_wait) and the GEMMs with every mbarrier wait polling (test_wait) vs try_wait, same call.
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$OUT/s10c2; mkdir -p $R
(cd bundle/kdev && bash build.sh > $R/build.txt 2>&1) &
(cd bundle/kdev_tw && bash build.sh > $R/build-tw.txt 2>&1) &
(cd bundle/kdev && nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I kernels/include ingest_bench.cu -o ingest_bench > $R/build-ingest.txt 2>&1)
timeout 150 bundle/kdev/ingest_bench 2 > $R/ingest2.txt 2>&1; echo "ingest rc=$?"
wait
cd bundle/kdev
timeout 100 python3 harness.py --lib ../kdev_tw/libfp8gemm.so check --shapes 64,4096,4096 16,51200,5120 130,256,1536 600,1024,2048 1,5120,25600 > $R/check-tw.txt 2>&1; tail -2 $R/check-tw.txt
SH="1,4096,4096 16,4096,4096 64,4096,4096 128,4096,4096 192,4096,4096 256,4096,4096 512,4096,4096 2048,4096,4096 1,10240,5120 16,51200,5120 1,5120,25600"
for rep in 1 2; do
  for v in try tw; do
    d=../kdev; [[ $v == tw ]] && d=../kdev_tw
    timeout 100 python3 harness.py --lib $d/libfp8gemm.so sweep --no-full --only auto --shapes $SH > $R/sweep-$v-$rep.txt 2>&1
  done
done
python3 - $R <<'PY'
import sys, glob, collections
d = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/sweep-*.txt")):
    v = f.split("sweep-")[1].split("-")[0]
    for l in open(f):
        p = l.split()
        if p and p[0] == "SWEEP" and p[1] != "M":
            d[(int(p[1]), int(p[2]), int(p[3]), v)].append(f"{float(p[5]):.2f}/{float(p[6]):.2f}")
for k in sorted({k[:3] for k in d}):
    print(*k, "| try", *d[k + ("try",)], "| test_wait", *d[k + ("tw",)])
PY
grep -E "^INGEST2 (try_wait|test_wait) . (128|256) [246] 132 hot" $R/ingest2.txt
cd $OUT && tar czf s10c2.tgz s10c2 && rm -rf s10c2
