#!/bin/bash
# Session 16, call 6 (final code): decode b1 x3 / b16 x2 (fp8, default pacing) interleaved with
# the unpaced fill, and the bf16-weights baseline at b1 / b16 (--linear bf16).
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
nvidia-smi --query-gpu=serial,clocks.sm,power.draw --format=csv,noheader
xz -dc bundle/dev/decode.xz > bundle/bin/decode; chmod +x bundle/bin/decode
OUT=$R/dec REPEAT=3 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh "X=1 CANDLE_FP8_PREFILL_WINDOW=0" "1 16" > $R/decode.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
cat $R/dec/sweep-table.txt
OUT=$R/bf16 WARMUP=0 DECODE_ARGS="--linear bf16" DECODE_TIMEOUT=90 bash scripts/dev/decode_sweep.sh "X=1" "1 16" > $R/bf16.txt 2>&1
cat $R/bf16/sweep-table.txt
grep -h "peak\|TTFT" $R/dec/sweep-X_1-b1-r1.log $R/dec/sweep-X_1-b16-r1.log | cut -c1-60
echo "done at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf s16call6.tgz r && rm -rf r && echo packed
