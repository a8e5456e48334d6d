#!/bin/bash
# Session 34, call 4: the narrowed rule (stream-K only from 3 waves of 64-row tiles: gate/up at
# 9-32 tokens; q|k|v back to one tile per CTA) against decode_old (the dispatch before this
# session). Call 3 had b32 10.77 vs 10.91 ms with q|k|v 32 in stream-K too, whose op and "into"
# were both slower. Prediction: b32 <= 10.77 (gate/up's -3 us x 64 layers, without q|k|v's loss).
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
OUT=$R/dec REPEAT=2 DECODE_TOKENS=32 bash scripts/dev/decode_sweep.sh "DECODE_BIN=$BIN/decode_old X=new" "32" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
sed 's@/[^ ]*/bundle/bin/@@' $R/dec/sweep-table.txt
pack_out s34dec32
