#!/bin/bash
# Session 18, call 1 (NOT RUN: no device was lent in session 18; ready for the next session):
# the full linear with the quantization inside the swap-AB GEMM (M <= 8, opt-in:
# CANDLE_FP8_QUANT_IN=1 / Fp8BlockLinear::with_in_kernel_quantization).
# Correctness first (gpu suite with the new bit-equality test, the forced-split test with the
# in-kernel path at splits 1-8, compute-sanitizer memcheck + racecheck on it), then the five
# decode shapes at M = 1 and 8: ours / into / full, in-kernel (CANDLE_FP8_QUANT_IN=1) vs off (0).
source scripts/dev/call_prelude.sh
run_suites gpu
timeout 120 $BIN/gpu_reliability --test-threads=1 --nocapture forced_splits > $R/test-forced.txt 2>&1
echo "forced_splits rc=$? $(grep '^test result' $R/test-forced.txt) at $(elapsed)"
for tool in memcheck racecheck; do
  CANDLE_FP8_TEST_PROVIDERS=hopper timeout 150 compute-sanitizer --tool $tool --error-exitcode 99 --print-limit 20 \
    $BIN/gpu_reliability --test-threads=1 --nocapture forced_splits > $R/san-$tool.txt 2>&1
  echo "sanitizer $tool rc=$? $(grep -h 'ERROR SUMMARY\|RACECHECK SUMMARY\|test result' $R/san-$tool.txt | tr '\n' ' ') at $(elapsed)"
done
# SASS of the in-kernel-quantization instantiations (QGMMA present, no LDL/STL).
PATH=/usr/local/cuda/bin:$PATH cuobjdump -sass $BIN/bench > $R/bench.sass 2>/dev/null
python3 scripts/dev/sass_count.py $R/bench.sass | grep -E "kernel|SwapABILi8ELi8ELi0ELb1ELb1E" ; rm -f $R/bench.sass
SH="1,4096,4096 8,4096,4096 1,10240,5120 8,10240,5120 1,5120,8192 8,5120,8192 1,51200,5120 8,51200,5120 1,5120,25600 8,5120,25600"
for round in 1 2; do
  for q in 1 0; do
    CANDLE_FP8_QUANT_IN=$q timeout 150 $BIN/bench --shapes $SH --columns ours,into,full --samples 15 --json $R/bench-q$q-r$round.json > $R/bench-q$q-r$round.txt 2>&1
    echo "bench quant_in=$q round $round rc=$? at $(elapsed)"
  done
done
for f in $R/bench-q*-r*.json; do
  python3 - "$f" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))['rows']
print(sys.argv[1].split('/')[-1])
for r in rows:
    print(f"  {r['m']:>2}x{r['n']}x{r['k']} {r['temp']:<4} ours {r['ours_us']} into {r['ours_into_us']} full {r['full_linear_us']}")
PY
done
pack_out s18call1
