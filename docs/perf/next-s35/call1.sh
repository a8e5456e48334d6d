#!/bin/bash
# Prepared in session 34 (refused: no device time left), to run first in session 35: the narrowed rule (stream-K only from 3 waves of 64-row tiles: gate/up at
# 9-32 tokens; q|k|v back to one tile per CTA) against decode_old (the dispatch before this
# session). Call 3 had b32 10.77 vs 10.91 ms with q|k|v 32 in stream-K too, whose op and "into"
# were both slower. Prediction: b32 <= 10.77 (gate/up's -3 us x 64 layers, without q|k|v's loss).
# First forced_splits_match_reference (the stream-K and split-tail fix-ups now share their
# partial store / add helpers, tail_fixup.cuh: a refactor, same arithmetic).
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
timeout 150 $BIN/gpu_reliability forced_splits --test-threads=1 > $R/test-forced.txt 2>&1
echo "forced_splits rc=$? $(grep '^test result' $R/test-forced.txt) at $(elapsed)"
grep -h "SKIP\|FAILED\|panicked" $R/test-forced.txt | head -5
OUT=$R/dec REPEAT=2 DECODE_TOKENS=32 bash scripts/dev/decode_sweep.sh "DECODE_BIN=$BIN/decode_old X=new" "32" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
sed 's@/[^ ]*/bundle/bin/@@' $R/dec/sweep-table.txt
pack_out s34dec32
