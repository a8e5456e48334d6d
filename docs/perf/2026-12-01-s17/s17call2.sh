#!/bin/bash
# Session 17, call 2: per-CTA records of the M = 1 swap-AB GEMM chains (which CTAs end late, and
# why), and the K split of the q|k|v GEMM at M = 1 / 16 (into, hot + cold).
source scripts/dev/call_prelude.sh
for spec in 1,10240,5120:into 1,10240,5120:ours 1,5120,25600:into 1,51200,5120:into 1,5120,8192:into; do
  sh=${spec%%:*}; c=${spec#*:}
  timeout 60 $BIN/bench_trace --shapes $sh --no-cold --no-check --samples 10 --settle-ms 100 \
    --columns $c --trace-out $R/t.bin > $R/tb-$sh-$c.txt 2>&1
  python3 scripts/dev/trace_timeline.py $R/t.bin --chain 12 --ctas $R/ctas-$sh-$c.csv > $R/tt-$sh-$c.txt 2>&1
  rm -f $R/t.bin
done
echo "traces done at $(elapsed)"
for v in X=1 CANDLE_FP8_SPLIT=10240x5120=2 CANDLE_FP8_SPLIT=10240x5120=3 CANDLE_FP8_SPLIT=10240x5120=5; do
  env $v timeout 100 $BIN/bench --shapes 1,10240,5120 16,10240,5120 --no-check --columns ours,into --samples 15 > "$R/bench-$v.txt" 2>&1
  echo "bench $v rc=$? at $(elapsed)"
done
for f in $R/tt-*.txt; do echo "== $(basename $f)"; sed -n 1,5p $f; done
for v in X=1 CANDLE_FP8_SPLIT=10240x5120=2 CANDLE_FP8_SPLIT=10240x5120=3 CANDLE_FP8_SPLIT=10240x5120=5; do
  echo "== bench $v"; grep "m=" "$R/bench-$v.txt" | sed 's/ | .*//'
done
pack_out s17call2
