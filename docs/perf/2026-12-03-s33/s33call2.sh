#!/bin/bash
# Session 33, call 2: next-s33's near-miss sweep and q|k|v chain traces in one call. Carry
# bundle/trace only (lib_head.so.xz = scripts/dev/build.sh at HEAD, bench_trace.xz =
# -DFP8GEMM_TRACE bench at HEAD). ~7 device minutes.
export OUT
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
xz -dc bundle/trace/lib_head.so.xz > $BIN/lib_head.so
H="python3 scripts/dev/harness.py --lib $BIN/lib_head.so"
for s in 32,5120,25600 64,4096,4096 32,10240,5120; do
  timeout 110 $H sweep --no-full --shapes $s > $R/sweep-$s.txt 2>&1
  echo "sweep $s rc=$? at $(elapsed)"; grep BEST $R/sweep-$s.txt
done
timeout 60 $H sweep --no-full --shapes 16,10240,5120 \
  --only auto,swap_ab16x64s8,swap_ab16x64s7,swap_ab16x64s8k2,swap_ab16x64s7k2,swap_ab16x64s7k3,swap_ab16x64s8k3,swap_ab32x64s8,swap_ab32x64s8k2 \
  > $R/sweep-16,10240,5120.txt 2>&1
echo "sweep q|k|v 16 rc=$? at $(elapsed)"
cat $R/sweep-*.txt > $R/sweep.txt
python3 scripts/dev/summarize.py sweep $R/sweep.txt > $R/sweep-summary.txt 2>&1
tail -60 $R/sweep-summary.txt
pack_out s33sweep
R=$OUT/r; mkdir -p $R
xz -dc bundle/trace/bench_trace.xz > $BIN/bench_trace && chmod +x $BIN/bench_trace
for m in 16 32 64; do
  for v in into:cold into:hot ours:cold; do
    (( $(date +%s) - T0 > 540 )) && break 2
    col=${v%%:*}; t=${v#*:}; extra=""; [[ $t == hot ]] && extra=--no-cold
    timeout 40 "$BIN/bench_trace" --shapes $m,10240,5120 --columns $col --samples 3 --no-check $extra \
      --trace-out $R/t.trace > $R/bench-qkv$m-$col-$t.txt 2>&1
    echo "== q|k|v $m tokens, $col $t (rc=$?)"
    python3 scripts/dev/trace_timeline.py $R/t.trace --chain 24 --ctas $R/qkv$m-$col-$t.csv > $R/chain-qkv$m-$col-$t.txt 2>&1
    tail -12 $R/chain-qkv$m-$col-$t.txt
    rm -f $R/t.trace
  done
done
pack_out s33traces
