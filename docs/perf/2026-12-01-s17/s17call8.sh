#!/bin/bash
# Session 17, call 8 (final code: q|k|v split 2 at M <= 8): GPU suites, compute-sanitizer
# memcheck + racecheck on the forced-split test (swap-AB paced fill, 2-CTA sums), decode b1 / b16
# x2, the q|k|v rows with the accuracy check and every column.
source scripts/dev/call_prelude.sh
run_suites gpu gpu_fused qwen3_gpu
for tool in memcheck racecheck; do
  CANDLE_FP8_TEST_PROVIDERS=hopper timeout 150 compute-sanitizer --tool $tool --error-exitcode 99 --print-limit 20 \
    $BIN/gpu_reliability --test-threads=1 --nocapture forced_splits > $R/san-$tool.txt 2>&1
  echo "sanitizer $tool rc=$? $(grep -h 'ERROR SUMMARY\|RACECHECK SUMMARY\|test result' $R/san-$tool.txt | tr '\n' ' ') at $(elapsed)"
done
OUT=$R/dec REPEAT=2 bash scripts/dev/decode_sweep.sh "X=1" "1 16" > $R/decode.txt 2>&1
echo "decode at $(elapsed)"
timeout 200 $BIN/bench --shapes 1,10240,5120 2,10240,5120 4,10240,5120 8,10240,5120 16,10240,5120 --samples 15 --json $R/bench.json > $R/bench.txt 2>&1
echo "bench rc=$? at $(elapsed)"
cat $R/dec/sweep-table.txt
grep "m=" $R/bench.txt | sed 's/ | .*//'
python3 -c "import json; [print(r['m'], r['temp'], r['relerr']) for r in json.load(open('$R/bench.json'))['rows']]"
pack_out s17call8
