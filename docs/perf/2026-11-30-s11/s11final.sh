#!/bin/bash
# Session 11, final call (commit 2cc6c09 + docs): GPU suites, forced splits plain + racecheck +
# memcheck, bench (op + into) + anchors on the decode shapes, decode b1 / b16 twice.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
PACK=0 OUT=$R bash bundle/gpu_run.sh env test > $R/test-phase.txt 2>&1
echo "tests done at $(( $(date +%s) - T0 )) s: $(grep '^tests:' $R/summary.txt)"
BIN=$PWD/bundle/bin
timeout 100 $BIN/gpu_reliability --nocapture --test-threads=1 forced_splits sanitizer_boundary > $R/reliability.txt 2>&1; echo "reliability rc=$? $(grep '^test result' $R/reliability.txt)" | tee -a $R/summary.txt
for tool in racecheck memcheck; do
  CANDLE_FP8_TEST_PROVIDERS=hopper timeout 120 compute-sanitizer --tool $tool --error-exitcode 99 --print-limit 20 $BIN/gpu_reliability --test-threads=1 --nocapture forced_splits > $R/san-$tool.txt 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $R/san-$tool.txt | tail -1) $(grep '^test result' $R/san-$tool.txt)" | tee -a $R/summary.txt
done
SH="16,4096,4096 16,10240,5120 16,5120,8192 16,51200,5120 16,5120,25600 1,5120,8192 1,5120,25600"
PACK=0 OUT=$R BENCH_TIMEOUT=200 ANCHORS_TIMEOUT=200 BENCH_ARGS="--shapes $SH" ANCHORS_ARGS="--no-ceilings --shapes $SH" bash bundle/gpu_run.sh bench anchors > $R/bench-phase.txt 2>&1
echo "bench done at $(( $(date +%s) - T0 )) s"
python3 scripts/perf_table.py $R/bench.json $R/anchors.log > $R/table.txt 2>&1
OUT=$R/dec REPEAT=2 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh "CANDLE_FP8_X=0" "1 16" > $R/decode.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
grep -v "^===" $R/summary.txt
cut -c1-250 $R/table.txt | tail -8
cat $R/dec/sweep-table.txt
grep -h -E "^peak memory" $R/dec/sweep-CANDLE_FP8_X_0-b*-r1.log
cd $OUT && tar czf s11final.tgz r && rm -rf r && echo packed
