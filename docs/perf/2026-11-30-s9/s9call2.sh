#!/bin/bash
# Session 9, call 2: GPU suites on the new small-M arrangement + fp8_block_matmul_into; forced
# splits (split 1 now included) under racecheck and memcheck.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
PACK=0 OUT=$R bash bundle/gpu_run.sh env test > $R/test-phase.txt 2>&1
echo "tests done at $(( $(date +%s) - T0 )) s: $(grep '^tests:' $R/summary.txt)"
BIN=$PWD/bundle/bin
timeout 120 $BIN/gpu_reliability --nocapture --test-threads=1 forced_splits > $R/reliability-splits.txt 2>&1; echo "reliability rc=$? $(grep '^test result' $R/reliability-splits.txt)" | tee -a $R/summary.txt
for tool in racecheck memcheck; do
  CANDLE_FP8_TEST_PROVIDERS=hopper timeout 140 compute-sanitizer --tool $tool --error-exitcode 99 --print-limit 20 $BIN/gpu_reliability --test-threads=1 --nocapture forced_splits > $R/san-$tool.txt 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $R/san-$tool.txt | tail -1) $(grep '^test result' $R/san-$tool.txt)" | tee -a $R/summary.txt
done
echo "sanitizers done at $(( $(date +%s) - T0 )) s"
cat $R/summary.txt
grep -E "FAILED|panicked|failed" $R/*.log | head -20
cd $OUT && tar czf s9c2.tgz r && rm -rf r && echo packed
