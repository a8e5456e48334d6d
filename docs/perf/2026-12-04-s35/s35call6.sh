#!/bin/bash
# Session 35 call 6: bench --config (new) on q|k|v at 16 tokens: the dispatched one-tile swap-AB
# 16x64 s8 forced through the flag (must match the default run) and stream-K 16x64 s7 at 3 / 2
# CTAs per SM (session 34: op 19.7, "into" 16.3 at 3 per SM).
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
for c in dflt 2,16,64,8,1 5,16,64,7,3 5,16,64,7,2; do
  a=""; [[ $c != dflt ]] && a="--config $c"
  timeout 40 $BIN/bench --shapes 16,10240,5120 --columns ours,into $a > $R/b-$c.txt 2>&1
  echo "$c rc=$? $(grep -E '^config' $R/b-$c.txt) $(grep -E '^ *m=16 *(hot|cold)' $R/b-$c.txt | awk '{printf "%s ours %s into %s | ", $2, $4, $6}') $(grep -i 'relerr\|wrong\|error' $R/b-$c.txt | head -2)"
done
pack_out s35call6
