#!/bin/bash
# Session 11, call 4 (commit with the batched norm loads + random e4m3 weights generated in
# place): GPU suites; racecheck + memcheck of the norm / split-K partials tests (quick);
# decode b1 / b16 twice (TPOT and peak memory: the random-weight build no longer leaves holes);
# accuracy mode on the 32B architecture (new random weights) and the tiny default.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
PACK=0 OUT=$R bash bundle/gpu_run.sh env test > $R/test-phase.txt 2>&1
echo "tests done at $(( $(date +%s) - T0 )) s: $(grep '^tests:' $R/summary.txt)"
BIN=$PWD/bundle/bin
for tool in racecheck memcheck; do
  CANDLE_FP8_GPU_QUICK=1 timeout 100 compute-sanitizer --tool $tool --error-exitcode 99 --print-limit 20 $BIN/gpu_fused --test-threads=1 --nocapture add_rmsnorm split_k > $R/san-$tool.txt 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $R/san-$tool.txt | tail -1) $(grep '^test result' $R/san-$tool.txt)" | tee -a $R/summary.txt
done
OUT=$R/dec REPEAT=2 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh "CANDLE_FP8_X=0" "1 16" > $R/decode.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
timeout 150 $BIN/decode --device cuda --random-weights qwen3-32b --prompt-len 100 --check-accuracy 32 --max-new-tokens 8 > $R/acc-32b.log 2>&1; echo "acc 32b rc=$?"
timeout 60 $BIN/decode --device cuda --check-accuracy 256 --max-new-tokens 8 > $R/acc-tiny.log 2>&1; echo "acc tiny rc=$?"
grep -v "^===" $R/summary.txt
cat $R/dec/sweep-table.txt
grep -h -E "^peak memory|^memory pool|^load" $R/dec/sweep-CANDLE_FP8_X_0-b*-r1.log
grep -h -iE "top-1|agree" $R/acc-32b.log $R/acc-tiny.log | head -6
echo "all done at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf s11call4.tgz r && rm -rf r && echo packed
