#!/bin/bash
# Session 20, call 6: why the full linear (bf16 in: quantize + GEMM) at M = 1 is 2.3 / 4.5 us over
# the GEMM in the whole-table runs (4096², o) but ~0.8 / -0.6 in shapes-only runs: the same
# bench binary with the lt / bf16 columns on or off, in turn.
source scripts/dev/call_prelude.sh
SH="1,4096,4096 1,5120,8192 1,10240,5120"
for cols in ours,into,full ours,into,lt,bf16,full ours,into,lt,full ours,into,bf16,full ours,into,full; do
  timeout 100 $BIN/bench --shapes $SH --columns $cols --full-linear-max-m 1 --samples 15 > $R/bench-$cols.txt 2>&1
  echo "== $cols rc=$? at $(elapsed)"; grep " hot " $R/bench-$cols.txt | sed 's/ | .*//'
done
pack_out s20call6
