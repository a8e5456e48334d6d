#!/bin/bash
# Session 32, call 1 (bundle route; bundle/dev from 65bc4e0's kernels, later commits touch
# comments only). 1. The full gpu and gpu_reliability suites (session 31 ran the gpu suite's
# quick grid only). 2. Per-CTA timelines of 24 chained q|k|v launches at 16 / 32 / 64 tokens:
# "into" cold (the bench's last chain), "into" hot (--no-cold) and the op ("ours", cold): why is
# "into" 1-2 us slower than the op, and why is 32 tokens' hot "into" 2.3 us slower than its cold?
# 3. The weight evict-first hint off vs on at q|k|v 16 / 32 "into", two interleaved rounds.
source scripts/dev/call_prelude.sh
SUITE_TIMEOUT=260 run_suites gpu gpu_reliability
for m in 16 32 64; do
  for v in into:cold into:hot ours:cold; do
    col=${v%%:*}; t=${v#*:}; extra=""; [[ $t == hot ]] && extra=--no-cold
    timeout 60 "$BIN/bench_trace" --shapes $m,10240,5120 --columns $col --samples 3 --no-check $extra \
      --trace-out $R/qkv$m-$col-$t.trace > $R/bench-qkv$m-$col-$t.txt 2>&1
    echo "== q|k|v $m tokens, $col $t (rc=$?)"
    python3 scripts/dev/trace_timeline.py $R/qkv$m-$col-$t.trace --chain 24 --ctas $R/qkv$m-$col-$t.csv | tail -12
  done
done
echo "traces at $(elapsed)"
for r in 1 2; do
  for ef in 1 0; do
    CANDLE_FP8_WEIGHT_EVICT_FIRST=$ef timeout 60 "$BIN/bench" --shapes 16,10240,5120 32,10240,5120 64,10240,5120 \
      --columns into,ours --no-check > $R/bench-ef$ef-r$r.txt 2>&1
    echo "evict-first=$ef round $r rc=$?"; grep -E "^qkv|^custom" $R/bench-ef$ef-r$r.txt
  done
done
xz -T0 $R/*.trace
pack_out s32call1
