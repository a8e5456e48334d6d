#!/bin/bash
# Session 31 call 5 (run as a one-line command right after call 4, on its warm machine, same
# bundle/dev): one more decode round, 64 then 48 sequences, 09dba4f (old) first, then this tree.
source scripts/dev/call_prelude.sh >/dev/null
OUT=$R/dec REPEAT=1 DECODE_TOKENS=32 WARMUP=0 bash scripts/dev/decode_sweep.sh "DECODE_BIN=$BIN/decode_old X=new" "64 48" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"; sed 's@/[^ ]*/bundle/bin/@@' $R/dec/sweep-table.txt
pack_out s31call5
