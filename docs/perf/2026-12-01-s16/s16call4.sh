#!/bin/bash
# Session 16, call 4: the paced first fill with release (CANDLE_FP8_PREFILL_WINDOW=W, pacing
# stops once the previous kernel is done; CANDLE_FP8_PREFILL_RELEASE=0 paces to the end).
# Correctness with W = 3 (gpu, gpu_fused, qwen3_gpu); decode b1 / b16 interleaved x3; b1 trace.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
nvidia-smi --query-gpu=serial,clocks.sm,power.draw --format=csv,noheader
for f in bundle/dev/*.xz; do b=$(basename $f .xz); xz -dc $f > bundle/bin/$b; done; chmod +x bundle/bin/*
BIN=$PWD/bundle/bin
for spec in gpu_fused:3 qwen3_gpu:3 gpu:3; do
  t=${spec%%:*}; w=${spec#*:}
  CANDLE_FP8_PREFILL_WINDOW=$w timeout 200 $BIN/$t --test-threads=1 > $R/test-$t-w$w.txt 2>&1
  echo "$t W=$w rc=$? $(grep '^test result' $R/test-$t-w$w.txt) at $(( $(date +%s) - T0 )) s"
done
grep -h "SKIP\|FAILED\|panicked" $R/test-*.txt | head -5
S="X=1 CANDLE_FP8_PREFILL_WINDOW=2 CANDLE_FP8_PREFILL_WINDOW=3 CANDLE_FP8_PREFILL_WINDOW=4 CANDLE_FP8_PREFILL_WINDOW=2,CANDLE_FP8_PREFILL_RELEASE=0"
OUT=$R/dec REPEAT=3 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh "$S" "1 16" > $R/decode.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
cat $R/dec/sweep-table.txt
D="--device cuda --random-weights qwen3-32b --prompt-len 100 --ignore-eos --max-new-tokens 48 --batch 1"
for w in 2 3; do
  CANDLE_FP8_PREFILL_WINDOW=$w $BIN/decode_trace $D --trace-out $R/trace-w$w.bin > $R/trace-w$w.log 2>&1
  echo "trace W=$w: $(grep -E '^TPOT' $R/trace-w$w.log)"
  python3 bundle/dev/trace_timeline.py $R/trace-w$w.bin --steps 4 > $R/timeline-w$w.txt 2>&1
  tail -n 11 $R/timeline-w$w.txt; rm -f $R/trace-w$w.bin
done
echo "done at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf s16call4.tgz r && rm -rf r && echo packed
