#!/bin/bash
# Session 20, call 7: the bench with the full linear timed right after ours / into (before the
# cuBLASLt and bf16 columns), every column, the three M = 1 shapes of call 6, twice.
source scripts/dev/call_prelude.sh
SH="1,4096,4096 1,5120,8192 1,10240,5120"
for r in 1 2; do
  timeout 100 $BIN/bench --shapes $SH --full-linear-max-m 1 --samples 15 > $R/bench-r$r.txt 2>&1
  echo "== r$r rc=$? at $(elapsed)"; grep " hot \| cold " $R/bench-r$r.txt | sed 's/ | .*//'
done
pack_out s20call7
