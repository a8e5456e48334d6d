#!/bin/bash
# Session 10 call 9: decode b1 — split K of the M = 1 GEMMs: base (5c82d4e) vs a: o projection
# (1x5120x8192) split 4 instead of 3 (its partials summed by the next norm) vs b: qkv
# (1x10240x5120) split 2 (a 2-CTA cluster) instead of 1; interleaved, three times.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$OUT/s10c9; mkdir -p $R bundle/bin
for v in base a b; do mkdir -p bundle/bin_$v && xz -dc bundle/dec/decode_$v.xz > bundle/bin_$v/decode && chmod +x bundle/bin_$v/decode; done
cp bundle/bin_base/decode bundle/bin/decode
cp bundle/kdev/decode_sweep.sh scripts/dev/decode_sweep.sh
OUT=$R REPEAT=3 bash scripts/dev/decode_sweep.sh "DECODE_BIN=bundle/bin_base/decode DECODE_BIN=bundle/bin_a/decode DECODE_BIN=bundle/bin_b/decode" "1" > $R/decode.txt 2>&1
cat $R/sweep-table.txt
cd $OUT && tar czf s10c9.tgz s10c9 && rm -rf s10c9
