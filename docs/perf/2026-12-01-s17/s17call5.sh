#!/bin/bash
# Session 17, call 5: the paced-fill thread sleeps between polls (CANDLE_FP8_PACE_SLEEP_NS) —
# does its spinning slow the kernels it shares SMs with? Decode b1 / b16, interleaved, and the
# bench rows of the decode-size shapes (into / full).
source scripts/dev/call_prelude.sh
OUT=$R/dec REPEAT=2 bash scripts/dev/decode_sweep.sh "CANDLE_FP8_PACE_SLEEP_NS=0 CANDLE_FP8_PACE_SLEEP_NS=64 CANDLE_FP8_PACE_SLEEP_NS=256 CANDLE_FP8_PACE_SLEEP_NS=1000" "1 16" > $R/decode.txt 2>&1
echo "decode at $(elapsed)"
SH="1,10240,5120 16,10240,5120 1,5120,8192 1,51200,5120 1,5120,25600 1,4096,4096"
for v in 0 256; do
  env CANDLE_FP8_PACE_SLEEP_NS=$v timeout 200 $BIN/bench --shapes $SH --no-check --no-cold --columns into,full --samples 15 > "$R/bench-$v.txt" 2>&1
  echo "bench $v rc=$? at $(elapsed)"
done
cat $R/dec/sweep-table.txt
for v in 0 256; do echo "== sleep $v"; grep "m=" "$R/bench-$v.txt" | sed 's/ | .*//'; done
pack_out s17call5
