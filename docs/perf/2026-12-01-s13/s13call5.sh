#!/bin/bash
# Session 13, call 5 (final code, commit 7cb3471: swap-AB 32x64 at M = 17-32 on wide N, the
# 2-CTA split at M = 33-64 left out): gpu + qwen3_gpu suites; the bench rows the reverted rule
# touched (64x5120x25600, 64x5120x8192) and the new rule's gate_up row, with our cuBLASLt
# wrapper in the same run; decode b1 / b16 twice; the attention plan at b1.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
for f in bundle/dev/*.xz; do b=$(basename $f .xz); xz -dc $f > bundle/bin/$b; done; chmod +x bundle/bin/*
BIN=$PWD/bundle/bin
for t in gpu qwen3_gpu; do
  timeout 200 $BIN/$t --test-threads=1 > $R/test-$t.txt 2>&1; echo "$t rc=$? $(grep '^test result' $R/test-$t.txt) at $(( $(date +%s) - T0 )) s"
done
grep -h "SKIP\|FAILED\|panicked" $R/test-*.txt | head -5
timeout 120 $BIN/bench --json $R/bench.json --full-linear-max-m 1 --shapes 64,5120,25600 64,5120,8192 32,51200,5120 > $R/bench.log 2>&1; echo "bench rc=$? at $(( $(date +%s) - T0 )) s"
grep "m=" $R/bench.log
OUT=$R/dec REPEAT=2 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh "CANDLE_FP8_LAUNCH_AHEAD=1" "1 16" > $R/decode.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
grep -h "^TTFT\|^TPOT\|^peak memory" $R/dec/sweep-*-b1-r1.log $R/dec/sweep-*-b16-r1.log
cat $R/dec/sweep-table.txt
# The attention plan at b1 (only b16's was swept, session 10): splits x head splits, default first.
OUT=$R/attn REPEAT=2 WARMUP=0 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh "CANDLE_FP8_STEP_ATTENTION=one CANDLE_FP8_STEP_ATTENTION=one:-,4 CANDLE_FP8_STEP_ATTENTION=one:-,2 CANDLE_FP8_STEP_ATTENTION=one:2,8 CANDLE_FP8_STEP_ATTENTION=one:8,8" "1" > $R/attn.txt 2>&1
echo "attention plans done at $(( $(date +%s) - T0 )) s"
cat $R/attn/sweep-table.txt
cd $OUT && tar czf s13call5.tgz r && rm -rf r && echo packed
