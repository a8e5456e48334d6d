#!/bin/bash
# Session 17, call 7: the q|k|v GEMM's K split (default 1 at M <= 16; 2 = a 2-CTA cluster sum, no
# extra launch; 3 = a reduce launch) in the decode step (b1, b16) and in the bench (into, M 1-16).
source scripts/dev/call_prelude.sh
OUT=$R/dec REPEAT=2 bash scripts/dev/decode_sweep.sh "X=1 CANDLE_FP8_SPLIT=10240x5120=2 CANDLE_FP8_SPLIT=10240x5120=3" "1 16" > $R/decode.txt 2>&1
echo "decode at $(elapsed)"
SH="1,10240,5120 2,10240,5120 4,10240,5120 8,10240,5120 16,10240,5120"
for v in X=1 CANDLE_FP8_SPLIT=10240x5120=2; do
  env $v timeout 200 $BIN/bench --shapes $SH --no-check --columns ours,into --samples 15 > "$R/bench-$v.txt" 2>&1
  echo "bench $v rc=$? at $(elapsed)"
done
cat $R/dec/sweep-table.txt
for v in X=1 CANDLE_FP8_SPLIT=10240x5120=2; do echo "== $v"; grep "m=" "$R/bench-$v.txt" | sed 's/ | .*//'; done
pack_out s17call7
