#!/bin/bash
# Session 21, call 2: the 9-16-token dispatch (16-token tile at 7 stages everywhere; split 2
# instead of swap_split's 3 for o / down) against the previous build ("old").
# Build and pack here: bash /work/build.sh && rm -f bundle/dev/* && cp /tmp/decode_old.xz bundle/dev/ &&
#   CARGO_TARGET_DIR=/work/target-cuda bash scripts/dev/pack.sh bench decode gpu gpu_reliability &&
#   cp docs/perf/2026-12-02-s21/s21call2.sh bundle/dev/
# 0. Correctness first: gpu (reference grid incl. the Qwen3 shapes at M = 16, auto config) and
#    forced_splits (the 7-stage 16-token tile at M = 11 and 16, splits 1-8).
# 1. bench "ours" (op) and "into" at 9-16 tokens, two rounds; the old configs against the new in
#    one process through the sweep (op only; the old bench binary was not kept).
#    Prediction (call 1 sweep, op): q|k|v -0.8 us, o -2.0 hot / -0.7 cold, down -1.0.
# 2. decode b16, new vs old, three interleaved rounds (session 11: the q|k|v tile alone at 7
#    stages cost +0.07 ms; here q|k|v, o and down all change).
source scripts/dev/call_prelude.sh
run_suites gpu
timeout 300 $BIN/gpu_reliability forced_splits --test-threads=1 > $R/test-forced_splits.txt 2>&1
echo "forced_splits rc=$? $(grep '^test result' $R/test-forced_splits.txt) at $(elapsed)"
grep -h "SKIP\|FAILED\|panicked" $R/test-forced_splits.txt | head -5
SH="16,4096,4096 16,10240,5120 16,5120,8192 16,5120,25600 16,51200,5120 12,5120,8192 9,10240,5120"
for r in 1 2; do
  timeout 120 $BIN/bench --shapes $SH --columns ours,into --samples 15 > $R/bench-r$r.txt 2>&1
  echo "bench round $r rc=$? at $(elapsed)"
  grep -A20 "^shape" $R/bench-r$r.txt | grep "custom"
done
timeout 150 $BIN/bench --sweep --settle-ms 100 --samples 15 --shapes 16,4096,4096 12,5120,8192 \
  9,10240,5120 > $R/sweep-more16.txt 2>&1
echo "sweep rc=$? at $(elapsed)"
grep "SWEEP-BEST\|kind=2 16x64" $R/sweep-more16.txt
OUT=$R/dec REPEAT=3 bash scripts/dev/decode_sweep.sh "X=new DECODE_BIN=$BIN/decode_old" "16" > $R/decode.txt 2>&1
cat $R/dec/sweep-table.txt
echo "done at $(elapsed)"
pack_out s21call2
