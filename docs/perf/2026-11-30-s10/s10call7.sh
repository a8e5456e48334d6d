#!/bin/bash
# Session 10 call 7: decode — swap-AB 8 tokens x 9 stages at M <= 8 (two CTAs per SM, ~56 KB
# of shared memory left per SM for the small kernels between the GEMMs) vs x 8 (three CTAs,
# ~6 KB left): build 178dcd5 (old) vs the experiment (s9), interleaved, three times.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$OUT/s10c7; mkdir -p $R bundle/bin bundle/bin_old bundle/bin_s9
xz -dc bundle/dec/decode_old.xz > bundle/bin_old/decode && xz -dc bundle/dec/decode_s9.xz > bundle/bin_s9/decode && chmod +x bundle/bin_old/decode bundle/bin_s9/decode && cp bundle/bin_s9/decode bundle/bin/decode
cp bundle/kdev/decode_sweep.sh scripts/dev/decode_sweep.sh
OUT=$R REPEAT=3 bash scripts/dev/decode_sweep.sh "DECODE_BIN=bundle/bin_old/decode DECODE_BIN=bundle/bin_s9/decode" "1 16" > $R/decode.txt 2>&1
cat $R/sweep-table.txt
cd $OUT && tar czf s10c7.tgz s10c7 && rm -rf s10c7
