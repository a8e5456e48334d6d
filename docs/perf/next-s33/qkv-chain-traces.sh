#!/bin/bash
# Prepared in session 32 (not run; session 32's call 1 ran it and lost the output: the traces'
# xz ran past the 600 s limit). Carry bundle/dev AND bundle/trace (bench_trace, -DFP8GEMM_TRACE,
# 65bc4e0's kernels). ~2 device minutes. Per-CTA timelines of 24 chained q|k|v launches at 16 /
# 32 / 64 tokens: "into" cold, "into" hot and the op ("ours", cold). Why is "into" 0.8-2 us
# slower than the op at 16-64 tokens: which SMs each launch's CTAs land on, how many enter
# before the previous launch ends. Keeps the CSV summaries only (the 32 MB traces are deleted).
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
xz -dc bundle/trace/bench_trace.xz > $BIN/bench_trace && chmod +x $BIN/bench_trace
for m in 16 32 64; do
  for v in into:cold into:hot ours:cold; do
    col=${v%%:*}; t=${v#*:}; extra=""; [[ $t == hot ]] && extra=--no-cold
    timeout 60 "$BIN/bench_trace" --shapes $m,10240,5120 --columns $col --samples 3 --no-check $extra \
      --trace-out $R/t.trace > $R/bench-qkv$m-$col-$t.txt 2>&1
    echo "== q|k|v $m tokens, $col $t (rc=$?)"
    python3 scripts/dev/trace_timeline.py $R/t.trace --chain 24 --ctas $R/qkv$m-$col-$t.csv > $R/chain-qkv$m-$col-$t.txt 2>&1
    tail -12 $R/chain-qkv$m-$col-$t.txt
    rm -f $R/t.trace
  done
done
pack_out s33traces
