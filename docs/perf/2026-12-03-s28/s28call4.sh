#!/bin/bash
# Session 28 call 4: (1) bitwise, new vs old (bundle/old = HEAD 6259026's kernels), of the
# 2-CTA cluster sum split into halves — one process per library (scripts/dev/bitwise_dump.py);
# (2) the practical HBM floor of the decode-size GEMMs (scripts/dev/hbm_floor.py; call 3's graph
# captured nothing: the launch took the stream from before the capture).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"; T0=$(date +%s)
bash scripts/dev/build.sh > $O/build.txt 2>&1 && cp libfp8gemm.so /tmp/lib_plain.so || { tail $O/build.txt; exit 1; }
(cd bundle/old && bash scripts/dev/build.sh > $O/build-old.txt 2>&1 && cp libfp8gemm.so /tmp/lib_old.so) || exit 1
echo "builds at $(( $(date +%s) - T0 )) s"
C=warp_spec128x128s6k2,warp_spec128x128s106k2,warp_spec128x64s8k2,auto
S="128,5120,4096 100,6144,4096 128,4096,4096 77,8192,5120 65,5248,8192 256,4096,4096 200,272,1536 3,1024,4096 1,10240,5120 16,5120,8192"
for lib in plain old; do timeout 100 python3 scripts/dev/bitwise_dump.py /tmp/lib_$lib.so /tmp/bw_$lib.pt $C $S > $O/bw-$lib.txt 2>&1 || tail -3 $O/bw-$lib.txt; done
python3 scripts/dev/bitwise_dump.py --compare /tmp/bw_plain.pt /tmp/bw_old.pt > $O/bitwise.txt 2>&1; echo "bitwise rc=$?"
grep -v equal $O/bitwise.txt | head -12
timeout 200 python3 scripts/dev/hbm_floor.py --ctas 1 2 4 > $O/hbm.txt 2>&1
echo "hbm rc=$? at $(( $(date +%s) - T0 )) s"
cat $O/hbm.txt
