#!/bin/bash
# Session 10 call 3: (1) decode b1 / b16, build 178dcd5 (old) vs + swap-AB 16 x 64 x 7 at
# M = 9-16 wide N (new), interleaved, twice; (2) ring slot groups (2 or 4 K blocks per barrier
# hand-off) for small-M tiles: check, then sweep against the ungrouped configs, twice.
# (bundle/kdev held dev configs small_m 64x32/64x64/64x128 with stage keys 108/112/308/106,
# SmallM<TN, stages, halves, 1, group>, on the slot-group kernel change that was then reverted.)
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$OUT/s10c3; mkdir -p $R
(cd bundle/kdev && bash build.sh > $R/build.txt 2>&1) &
mkdir -p bundle/bin bundle/bin_old
xz -dc bundle/dec/decode_old.xz > bundle/bin_old/decode && xz -dc bundle/dec/decode_new.xz > bundle/bin/decode && chmod +x bundle/bin_old/decode bundle/bin/decode
cp bundle/kdev/decode_sweep.sh scripts/dev/decode_sweep.sh
wait
cd bundle/kdev
timeout 100 python3 harness.py check --shapes 64,4096,1152 48,1024,2048 100,4096,4096 130,256,1536 33,272,2048 64,384,640 64,4096,4096 > $R/check.txt 2>&1; tail -2 $R/check.txt
C=auto,small_m64x64s8k2,small_m64x64s108k2,small_m64x64s112k2,small_m64x64s308k2,small_m64x64s8,small_m64x64s108,small_m64x32s8,small_m64x32s108,small_m64x128s6k2,small_m64x128s106k2,small_m64x128s108k2,small_m64x128s6,small_m64x128s106,small_m64x64s8k4,small_m64x64s108k4
SH="32,4096,4096 64,4096,4096 96,4096,4096 128,4096,4096 192,4096,4096 256,4096,4096 64,5120,8192"
for rep in 1 2; do timeout 120 python3 harness.py sweep --no-full --only $C --shapes $SH > $R/sweep-$rep.txt 2>&1; done
cd ../..
OUT=$R/dec REPEAT=2 bash scripts/dev/decode_sweep.sh "DECODE_BIN=bundle/bin_old/decode DECODE_BIN=bundle/bin/decode" "16 1" > $R/decode.txt 2>&1
cat $R/dec/sweep-table.txt
