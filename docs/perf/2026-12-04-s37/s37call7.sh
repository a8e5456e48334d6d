#!/bin/bash
# Session 37 call 7: where a lone stream-K small-M launch loses (call 6: q|k|v 64 op 21.4 µs vs
# 17.1 for one 64 x 128 tile per CTA, yet "into" 18.0 vs 19.6; the decode step at 48 / 64
# sequences +3 % / +1.5 % with it). Per-piece traces (bench_trace = a -DFP8GEMM_TRACE build of
# call 6's code) of the op and "into" chains of 6,64,128,8,1, and the per-CTA chain summary of the
# one-tile 1,64,128,8,1 op.
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
Q=64,10240,5120
tr() {  # tr NAME COLUMN CONFIG
  timeout 60 $BIN/bench_trace --shapes $Q --columns $2 --no-cold --config $3 --trace-out $R/$1.bin > $R/$1.bench.txt 2>&1
  echo "== trace $1 rc=$? $(grep -E '^ *m=[0-9]+ *hot' $R/$1.bench.txt | awk '{printf "op %s into %s", $4, $6}')"
  if [[ $3 == 6,* ]]; then python3 scripts/dev/streamk_pieces.py $R/$1.bin --launches 8 > $R/$1.pieces.txt 2>&1
  else python3 scripts/dev/trace_timeline.py $R/$1.bin --chain 8 > $R/$1.pieces.txt 2>&1; fi
  rm -f $R/$1.bin
  cut -c1-220 $R/$1.pieces.txt | head -40
}
tr sk-op ours 6,64,128,8,1
tr sk-into into 6,64,128,8,1
tr one-op ours 1,64,128,8,1
echo "traces at $(elapsed)"
pack_out s37call7
