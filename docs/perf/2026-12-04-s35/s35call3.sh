#!/bin/bash
# Session 35 call 3: the two 16-token rows the same-run table (call 2) still misses by < 10 %.
# (1) gate_up 16x51200x5120 ("into" hot 64.06 vs <= 62.88 needed; cold 61.16 meets): stream-K CTAs
#     per SM 3 (dispatched) vs 2 vs 1 through CANDLE_FP8_SPLIT (= stream-K's CTAs per SM), 3 rounds,
#     plus the op-path sweep of every compiled configuration. Prediction: 2/SM within +-1 us.
# (2) q|k|v 16x10240x5120 ("into" 17.84 vs <= 16.08): split 2 measured 14.9 "into" in session 33 but
#     decode b16 +0.04 ms on 2 runs (not kept); decode b16 A/B again with 4 repeats each.
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
for r in 1 2 3; do
  for v in dflt 51200x5120=2 51200x5120=1 10240x5120=2; do
    s=$v; [[ $v == dflt ]] && s=""
    shape=16,51200,5120; [[ $v == 10240* ]] && shape=16,10240,5120
    CANDLE_FP8_SPLIT=$s timeout 60 $BIN/bench --shapes $shape --columns ours,into --no-check > $R/ab-$v-r$r.txt 2>&1
    echo "$v r$r rc=$? $(grep -E '^ *m=16 *(hot|cold)' $R/ab-$v-r$r.txt | awk '{printf "%s ours %s into %s | ", $2, $4, $6}')"
  done
done
echo "ab done at $(elapsed)"
# The default q|k|v shape for the baseline of (2):
CANDLE_FP8_SPLIT= timeout 60 $BIN/bench --shapes 16,10240,5120 --columns ours,into --no-check > $R/ab-qkv-dflt.txt 2>&1
echo "qkv dflt $(grep -E '^ *m=16 *(hot|cold)' $R/ab-qkv-dflt.txt | awk '{printf "%s ours %s into %s | ", $2, $4, $6}')"
timeout 150 $BIN/bench --sweep --shapes 16,51200,5120 > $R/sweep.txt 2>&1
echo "sweep rc=$? at $(elapsed)"; grep -E "SWEEP" $R/sweep.txt | sort -t' ' -k10 -n | head -12
OUT=$R/dec REPEAT=4 DECODE_TOKENS=32 bash scripts/dev/decode_sweep.sh "X=dflt CANDLE_FP8_SPLIT=10240x5120=2" "16" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
cat $R/dec/sweep-table.txt
pack_out s35call3
