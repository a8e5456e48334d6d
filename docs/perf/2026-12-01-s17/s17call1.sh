#!/bin/bash
# Session 17, call 1: where the bench's M = 1 swap-AB GEMMs lose to the HBM floor (q|k|v 10240×5120
# "into" ~17.5 µs vs 12.3 floor, 14.0 in the decode step) and where the full linear's extra µs go
# (o 5120×8192: +3.1–4.9 over the GEMM) — per-CTA traces of one bench column's launch chain;
# then runtime knobs on the same rows (normal build); a decode b1/b16 calibration of this machine.
source scripts/dev/call_prelude.sh
for sh in 1,10240,5120 1,5120,8192 16,10240,5120; do
  for c in into ours full; do
    timeout 60 $BIN/bench_trace --shapes $sh --no-cold --no-check --samples 10 --settle-ms 100 \
      --columns $c --trace-out $R/t.bin > $R/tb-$sh-$c.txt 2>&1
    python3 scripts/dev/trace_timeline.py $R/t.bin --chain 40 > $R/tt-$sh-$c.txt 2>&1
    rm -f $R/t.bin
  done
done
echo "traces done at $(elapsed)"
SH="1,10240,5120 16,10240,5120 1,5120,8192 1,51200,5120 1,5120,25600 1,4096,4096"
for v in X=1 CANDLE_FP8_PREFILL_WINDOW=0 CANDLE_FP8_WEIGHT_EVICT_FIRST=0; do
  env $v timeout 200 $BIN/bench --shapes $SH --no-check --columns ours,into,full --samples 15 > "$R/bench-$v.txt" 2>&1
  echo "bench $v rc=$? at $(elapsed)"
done
OUT=$R/dec REPEAT=2 bash scripts/dev/decode_sweep.sh "X=1" "1 16" > $R/decode.txt 2>&1
echo "decode at $(elapsed)"
for f in $R/tt-*.txt; do echo "== $(basename $f)"; sed -n 1,6p $f; done
for v in X=1 CANDLE_FP8_PREFILL_WINDOW=0 CANDLE_FP8_WEIGHT_EVICT_FIRST=0; do
  echo "== bench $v"; grep "m=" "$R/bench-$v.txt" | sed 's/ | .*//'
done
cat $R/dec/sweep-table.txt
pack_out s17call1
