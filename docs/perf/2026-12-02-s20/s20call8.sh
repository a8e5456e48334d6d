#!/bin/bash
# Session 20, call 8 (the last ~4 device minutes): the decode-shape GEMMs over 1.15x their HBM
# floor — does a 2-CTA cluster split (no reduce launch) or split 3 bring o / down closer than the
# default (o: 4; down: 4 at M <= 8, 3 at 16)? `CANDLE_FP8_SPLIT` (M <= 16), bench "into", then one
# decode b1 pair with down at split 2 (a first look, not conclusive).
source scripts/dev/call_prelude.sh
SH="1,5120,25600 8,5120,25600 16,5120,25600 1,5120,8192 16,5120,8192"
for s in none 5120x25600=2,5120x8192=2 5120x25600=3,5120x8192=3; do
  if [[ $s == none ]]; then unset CANDLE_FP8_SPLIT; else export CANDLE_FP8_SPLIT=$s; fi
  timeout 60 $BIN/bench --shapes $SH --columns into --samples 15 > $R/bench-$s.txt 2>&1
  echo "== $s rc=$? at $(elapsed)"; grep " hot \| cold " $R/bench-$s.txt | sed 's/ lt .*//'
done
unset CANDLE_FP8_SPLIT
DECODE_TOKENS=32 OUT=$R/dec bash scripts/dev/decode_sweep.sh "X=default CANDLE_FP8_SPLIT=5120x25600=2" "1" > $R/decode.txt 2>&1
cat $R/dec/sweep-table.txt
pack_out s20call8
