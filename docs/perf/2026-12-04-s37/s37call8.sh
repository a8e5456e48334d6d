#!/bin/bash
# Session 37 call 8 (the device time left): the op-path sweep of every compiled configuration on
# two near misses of the table, 64×4096² and q|k|v 32 (next-s38/call1.sh's first two shapes).
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
for s in 64,4096,4096 32,10240,5120; do
  timeout 70 $BIN/bench --sweep --shapes $s > $R/sweep-$s.txt 2>&1
  echo "sweep $s rc=$? at $(elapsed)"
  grep -E '^SWEEP ' $R/sweep-$s.txt | sort -t' ' -k12 -g | head -6 | cut -c1-150
  grep -E '^SWEEP-BEST' $R/sweep-$s.txt | cut -c1-200
done
pack_out s37call8
