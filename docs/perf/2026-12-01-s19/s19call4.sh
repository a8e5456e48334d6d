#!/bin/bash
# Session 19, call 4: the in-kernel quantization rebuilt on TMA-staged bf16 tiles (7 stages,
# quant_operand.cuh). Correctness first (the bit-equality test, the GEMM pipeline test, the
# forced-split test at splits 1-8, memcheck + racecheck on it, SASS counts), then the five decode
# shapes at M = 1 and 8: ours / into / full, in-kernel (CANDLE_FP8_QUANT_IN=1) vs off (0), two
# rounds.
source scripts/dev/call_prelude.sh
timeout 150 $BIN/gpu --test-threads=1 full_linear_quantizing quantize_then_gemm > $R/test-gpu.txt 2>&1
echo "gpu rc=$? $(grep '^test result' $R/test-gpu.txt) at $(elapsed)"
timeout 120 $BIN/gpu_reliability --test-threads=1 --nocapture forced_splits > $R/test-forced.txt 2>&1
echo "forced_splits rc=$? $(grep '^test result' $R/test-forced.txt) at $(elapsed)"
grep -h "FAILED\|panicked" $R/test-*.txt | head -5
for tool in memcheck racecheck; do
  CANDLE_FP8_TEST_PROVIDERS=hopper timeout 150 compute-sanitizer --tool $tool --error-exitcode 99 --print-limit 20 \
    $BIN/gpu_reliability --test-threads=1 --nocapture forced_splits > $R/san-$tool.txt 2>&1
  echo "sanitizer $tool rc=$? $(grep -h 'ERROR SUMMARY\|RACECHECK SUMMARY\|test result' $R/san-$tool.txt | tr '\n' ' ') at $(elapsed)"
done
PATH=/usr/local/cuda/bin:$PATH cuobjdump -sass $BIN/bench > $R/bench.sass 2>/dev/null
python3 scripts/dev/sass_count.py $R/bench.sass | grep -E "kernel|SwapABILi8ELi7ELi0ELb1ELb1E" ; rm -f $R/bench.sass
SH="1,4096,4096 8,4096,4096 1,10240,5120 8,10240,5120 1,5120,8192 8,5120,8192 1,51200,5120 8,51200,5120 1,5120,25600 8,5120,25600"
for round in 1 2; do
  for q in 1 0; do
    CANDLE_FP8_QUANT_IN=$q timeout 150 $BIN/bench --shapes $SH --columns ours,into,full --samples 15 --json $R/bench-q$q-r$round.json > $R/bench-q$q-r$round.txt 2>&1
    echo "bench quant_in=$q round $round rc=$? at $(elapsed)"
  done
done
python3 - $R/bench-q*-r*.json <<'PY'
import json, sys, collections
t = collections.defaultdict(list)
for f in sys.argv[1:]:
    q = f.split('bench-q')[1][0]
    for r in json.load(open(f))['rows']:
        t[(r['m'], r['n'], r['k'], r['temp'])].append((q, r['ours_into_us'], r['full_linear_us']))
print("shape temp | into | full off (r1 r2) | full in-kernel (r1 r2)")
for k, v in sorted(t.items()):
    into = min(x[1] for x in v)
    off = " ".join(f"{x[2]:.2f}" for x in v if x[0] == '0')
    on = " ".join(f"{x[2]:.2f}" for x in v if x[0] == '1')
    print(f"{k[0]}x{k[1]}x{k[2]} {k[3]} | {into:.2f} | {off} | {on}")
PY
pack_out s19call4
