#!/bin/bash
# Session 15, call 8 (final code: evict-first on the plain swap-AB tiles, not the gated one):
# gpu, gpu_fused, qwen3_gpu; decode default vs CANDLE_FP8_WEIGHT_EVICT_FIRST=0 x3 at b1 / b16;
# the bench's M = 1 rows with the full linear.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
nvidia-smi --query-gpu=serial,clocks.sm,power.draw --format=csv,noheader
for f in bundle/dev/*.xz; do b=$(basename $f .xz); xz -dc $f > bundle/bin/$b; done; chmod +x bundle/bin/*
BIN=$PWD/bundle/bin
for t in gpu gpu_fused qwen3_gpu; do
  timeout 200 $BIN/$t --test-threads=1 > $R/test-$t.txt 2>&1; echo "$t rc=$? $(grep '^test result' $R/test-$t.txt) at $(( $(date +%s) - T0 )) s"
done
grep -h "SKIP\|FAILED\|panicked" $R/test-*.txt | head -5
OUT=$R/dec REPEAT=3 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh \
  "X=1 CANDLE_FP8_WEIGHT_EVICT_FIRST=0" "1 16" > $R/decode.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
cat $R/dec/sweep-table.txt
grep -h "peak\|TTFT" $R/dec/sweep-X_1-b1-r1.log $R/dec/sweep-X_1-b16-r1.log | head -4
SH="1,4096,4096 1,10240,5120 1,5120,8192 1,51200,5120 1,5120,25600"
timeout 150 $BIN/bench --shapes $SH --full-linear-max-m 1 --json $R/bench-m1.json > $R/bench-m1.log 2>&1; echo "bench rc=$?"
grep -h "m=1 " $R/bench-m1.log | head -12
echo "done at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf s15call8.tgz r && rm -rf r && echo packed
