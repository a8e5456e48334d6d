#!/bin/bash
# Session 21, call 3 (same bundle as call 2): every compiled config x split on the table's
# mid-M rows that miss their target (<= 0.9 x the best peer), to check that the dispatcher's
# choice is the fastest compiled one there (last swept: sessions 7, 9, 15).
source scripts/dev/call_prelude.sh
timeout 560 $BIN/bench --sweep --settle-ms 100 --samples 15 --no-check --shapes \
  64,4096,4096 128,4096,4096 160,4096,4096 192,4096,4096 224,4096,4096 256,4096,4096 \
  64,10240,5120 128,10240,5120 128,5120,8192 128,5120,25600 64,51200,5120 128,51200,5120 \
  > $R/sweep-midm.txt 2>&1
echo "sweep rc=$? at $(elapsed)"
grep "SWEEP-BEST" $R/sweep-midm.txt
pack_out s21call3
