#!/bin/bash
# Session 20, call 5 (right after call 4, same machine): our half of the table on the final code
# (commit a2a380f: the 7-stage 16-token tile at >= 3 waves), then decode b1 / b16 twice.
source scripts/dev/call_prelude.sh
BENCH_STAMPS=1 timeout 300 $BIN/bench --json $R/bench.json --full-linear-max-m 1 > $R/bench.log 2>&1
echo "bench rc=$? at $(elapsed)"
OUT=$R/dec REPEAT=2 bash scripts/dev/decode_sweep.sh "X=final" "1 16" > $R/decode.txt 2>&1
cat $R/dec/sweep-table.txt
pack_out s20call5
